/* Hooks for sgk's own tests. Exported from libsgk but not installed: they are
 * not part of the public API and may change. */
#ifndef SGK_TESTING_H
#define SGK_TESTING_H

#include <stdint.h>

#include "sgk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Makes the k-th allocation from now fail (counting from 1), whether made by
 * the core or by a backend (host or device memory); only that one fails.
 * k <= 0 disarms. Either way the allocation count restarts at 0. The counter
 * is process-wide: arm it only while one thread calls into sgk. */
SGK_EXPORT void sgk_testing_fail_alloc_after(int64_t k);

/* Allocations counted since the last sgk_testing_fail_alloc_after call. */
SGK_EXPORT int64_t sgk_testing_alloc_count(void);

#ifdef __cplusplus
}
#endif
#endif
