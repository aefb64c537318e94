/* Live-allocation counting for leak checks in builds without
 * LeakSanitizer: this program's malloc family replaces glibc's (glibc
 * supports that and routes its own calls through it too) and forwards to
 * glibc's implementation, remembering, while recording, each block handed
 * out until it is freed. Under ASan, its allocator owns malloc and
 * LeakSanitizer does the job, so nothing is replaced. */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "rel.h"

#if defined(__SANITIZE_ADDRESS__)
#define REL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define REL_ASAN 1
#endif
#endif

#if defined(REL_ASAN) || !defined(__GLIBC__)

int rel_live_supported(void) { return 0; }
void rel_live_begin(void) {}
long rel_live_end(void) { return 0; }

#else

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

/* Open addressing over block addresses; 0 is empty, 1 a removed entry. */
#define SLOTS (1u << 18)
static uintptr_t table[SLOTS];
static atomic_flag lock = ATOMIC_FLAG_INIT;
static atomic_int recording;
static long live, overflowed;

static void take(void) { while (atomic_flag_test_and_set_explicit(&lock, memory_order_acquire)) {} }
static void give(void) { atomic_flag_clear_explicit(&lock, memory_order_release); }

static size_t slot_of(uintptr_t p) { return (size_t)((p >> 4) * 0x9E3779B97F4A7C15ull >> 46) & (SLOTS - 1); }

static void remember(void *ptr)
{
    if (ptr == NULL || !atomic_load_explicit(&recording, memory_order_relaxed))
        return;
    uintptr_t p = (uintptr_t)ptr;
    take();
    size_t i = slot_of(p);
    for (size_t n = 0; n < SLOTS; n++, i = (i + 1) & (SLOTS - 1))
        if (table[i] <= 1) {
            table[i] = p;
            live++;
            give();
            return;
        }
    overflowed++;
    give();
}

static void forget(void *ptr)
{
    if (ptr == NULL || !atomic_load_explicit(&recording, memory_order_relaxed))
        return;
    uintptr_t p = (uintptr_t)ptr;
    take();
    size_t i = slot_of(p);
    for (size_t n = 0; n < SLOTS && table[i] != 0; n++, i = (i + 1) & (SLOTS - 1))
        if (table[i] == p) {
            table[i] = 1;
            live--;
            break;
        }
    give();
}

int rel_live_supported(void) { return 1; }

void rel_live_begin(void)
{
    take();
    memset(table, 0, sizeof table);
    live = 0;
    overflowed = 0;
    give();
    atomic_store(&recording, 1);
}

long rel_live_end(void)
{
    atomic_store(&recording, 0);
    take();
    long n = overflowed ? -1 : live;
    give();
    return n;
}

void *malloc(size_t n)
{
    void *p = __libc_malloc(n);
    remember(p);
    return p;
}

void *calloc(size_t n, size_t size)
{
    void *p = __libc_calloc(n, size);
    remember(p);
    return p;
}

void *realloc(void *old, size_t n)
{
    void *p = __libc_realloc(old, n);
    if (old != NULL && (p != NULL || n == 0))
        forget(old);
    remember(p);
    return p;
}

void free(void *p)
{
    forget(p);
    __libc_free(p);
}

void *memalign(size_t align, size_t n)
{
    void *p = __libc_memalign(align, n);
    remember(p);
    return p;
}

void *aligned_alloc(size_t align, size_t n)
{
    return memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
    if (align < sizeof(void *) || (align & (align - 1)) != 0)
        return EINVAL;
    void *p = memalign(align, n);
    if (p == NULL)
        return ENOMEM;
    *out = p;
    return 0;
}

#endif
