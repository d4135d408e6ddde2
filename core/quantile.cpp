// placeholder until implemented
#include "core/quantile.h"
