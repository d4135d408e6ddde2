// placeholder until implemented
#include "core/aggregate.h"
