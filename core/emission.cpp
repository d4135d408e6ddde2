// placeholder until implemented
#include "core/emission.h"
