#ifndef SGK_BENCH_HOST_COPY_H
#define SGK_BENCH_HOST_COPY_H

/* Host memory copy bandwidth in GB/s (bytes read + bytes written), copying
 * with `threads` threads buffers far larger than any cache; best of a few
 * repeats. 0 when it could not be measured. */
double bench_host_copy_gbps(int threads, double quick);

#endif
