// placeholder until implemented
#include "core/pipeline.h"
