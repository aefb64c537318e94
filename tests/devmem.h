/* Device memory for tests that hand sgk device pointers of their own: host
 * memory for cpu, CUDA's driver API for cuda, the HIP runtime for hip and
 * OpenCL buffers for opencl, each through dlopen (the tests link no GPU
 * runtime). CUDA streams and
 * graphs too, for the tests that capture sgk_forward_device. */
#ifndef SGK_TESTS_DEVMEM_H
#define SGK_TESTS_DEVMEM_H

#include <stddef.h>

#include "sgk.h"
#include "util.h"

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
/* The same for the device of an sgk context; opencl too, whose memory is
 * cl_mem buffers of the context's cl_context (through its native handles
 * and the ICD loader, opened with dlopen), copied on its default queue. */
int devmem_open_context(sgk_context *ctx, devmem *m, char *why, size_t why_len);

/* A layer's weights in device memory: w's ten arrays copied to buffers of
 * m (bufs, in sgk_layer_desc's order), and desc (after
 * sgk_layer_desc_init) pointing at them with w's dims and eps. Returns 0,
 * or -1 with whatever was allocated released. */
int devmem_weights(const devmem *m, const sgkt_weights *w, sgk_layer_desc *desc, void *bufs[10]);
void devmem_weights_free(const devmem *m, void *bufs[10]);

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
/* The calling thread's current device: made ordinal's primary context (as
 * cudaSetDevice would), or read back. Memory devmem allocates afterwards on
 * this thread is that device's. */
int devmem_cuda_make_current(int ordinal);
int devmem_cuda_current_device(int *ordinal);

#endif
