// placeholder until implemented
#include "core/engine.h"
