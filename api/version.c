/* The library version, set by the build from the project version. */
#include "sgk.h"

#ifndef SGK_VERSION_STRING
#error "SGK_VERSION_STRING must be defined by the build"
#endif

SGK_EXPORT const char *sgk_version(void)
{
    return SGK_VERSION_STRING;
}
