/* Allocation fault injection: every allocation the core or a backend makes
 * asks sgk_fault_should_fail first, so tests can fail each one in turn and
 * check that nothing leaks and outputs stay untouched. */
#include <stdatomic.h>
#include <stdlib.h>

#include "sgk_internal.h"
#include "sgk_testing.h"

/* Process-wide by design (the only global state besides the registry). */
static atomic_int_fast64_t fail_at;     /* 0 = disarmed */
static atomic_int_fast64_t alloc_count; /* allocations since the last arm */
static _Thread_local int suspended;

SGK_EXPORT void sgk_testing_fail_alloc_after(int64_t k)
{
    atomic_store(&fail_at, 0);
    atomic_store(&alloc_count, 0);
    if (k > 0)
        atomic_store(&fail_at, k);
}

SGK_EXPORT int64_t sgk_testing_alloc_count(void)
{
    return atomic_load(&alloc_count);
}

void sgk_fault_suspend(int on)
{
    suspended = on;
}

int sgk_fault_should_fail(void)
{
    if (suspended)
        return 0;
    int_fast64_t n = atomic_fetch_add(&alloc_count, 1) + 1;
    int_fast64_t k = atomic_load(&fail_at);
    return k > 0 && n == k;
}

void *sgk_malloc(size_t bytes)
{
    if (sgk_fault_should_fail())
        return NULL;
    return malloc(bytes ? bytes : 1);
}
