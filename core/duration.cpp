// placeholder until implemented
#include "core/duration.h"
