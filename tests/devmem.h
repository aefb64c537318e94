/* Device memory for tests that hand sgk device pointers of their own: host
 * memory for cpu, CUDA's driver API for cuda and the HIP runtime for hip,
 * each through dlopen (the tests link no GPU runtime). CUDA streams and
 * graphs too, for the tests that capture sgk_forward_device. */
#ifndef SGK_TESTS_DEVMEM_H
#define SGK_TESTS_DEVMEM_H

#include <stddef.h>

typedef struct devmem {
    const char *what;
    int (*alloc)(void **p, size_t n);
    void (*release)(void *p);
    int (*h2d)(void *d, const void *h, size_t n);
    int (*d2h)(void *h, const void *d, size_t n);
    int (*sync)(void);
} devmem;

/* Fills m for the backend's device ordinal; on failure says why. */
int devmem_open(const char *backend, int ordinal, devmem *m, char *why, size_t why_len);

/* CUDA only, after devmem_open("cuda", ...): a stream, its capture into a
 * graph and the graph's replays; free and total device memory. Each returns
 * the driver's error code (0 on success). */
int devmem_cuda_stream_create(void **stream);
int devmem_cuda_stream_destroy(void *stream);
int devmem_cuda_stream_sync(void *stream);
int devmem_cuda_capture_begin(void *stream);
/* Ends the capture and instantiates the graph into *exec. */
int devmem_cuda_capture_end(void *stream, void **exec);
int devmem_cuda_graph_launch(void *exec, void *stream);
int devmem_cuda_graph_destroy(void *exec);
int devmem_cuda_mem_info(size_t *free_bytes, size_t *total_bytes);

#endif
