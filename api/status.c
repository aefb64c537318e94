/* Status strings and the per-thread message of the last failure. */
#include <stdio.h>
#include <string.h>

#include "sgk_internal.h"

/* Large enough for an OpenCL build log excerpt; longer messages are cut. */
#define SGK_ERROR_MAX 4096

static _Thread_local char last_error[SGK_ERROR_MAX];
static _Thread_local uint64_t error_serial;

SGK_EXPORT const char *sgk_status_string(sgk_status status)
{
    switch (status) {
    case SGK_OK: return "success";
    case SGK_ERR_NULL_POINTER: return "a required pointer or handle is NULL";
    case SGK_ERR_INVALID_ARGUMENT: return "invalid argument";
    case SGK_ERR_SIZE_OVERFLOW: return "size overflow";
    case SGK_ERR_UNSUPPORTED: return "unsupported";
    case SGK_ERR_UNKNOWN_BACKEND: return "unknown backend";
    case SGK_ERR_BACKEND_UNAVAILABLE: return "backend unavailable";
    case SGK_ERR_INVALID_DEVICE: return "invalid device";
    case SGK_ERR_UNKNOWN_VARIANT: return "unknown variant";
    case SGK_ERR_OUT_OF_MEMORY: return "out of memory";
    case SGK_ERR_BACKEND: return "backend runtime error";
    case SGK_ERR_INSUFFICIENT_WORKSPACE: return "insufficient workspace";
    }
    return "unknown status";
}

SGK_EXPORT const char *sgk_last_error(void)
{
    return last_error;
}

sgk_status sgk_set_errorv(sgk_status status, const char *fmt, va_list ap)
{
    /* Format aside first: an argument may be last_error itself (a backend
     * wrapping the previous message). */
    char buf[SGK_ERROR_MAX];
    if (fmt == NULL) {
        buf[0] = '\0';
    } else if (vsnprintf(buf, sizeof buf, fmt, ap) < 0) {
        snprintf(buf, sizeof buf, "%s (message could not be formatted)",
                 sgk_status_string(status));
    }
    memcpy(last_error, buf, sizeof buf);
    error_serial++;
    return status;
}

sgk_status sgk_set_error(sgk_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sgk_status st = sgk_set_errorv(status, fmt, ap);
    va_end(ap);
    return st;
}

uint64_t sgk_error_serial(void)
{
    return error_serial;
}

sgk_status sgk_backend_result(sgk_status st, uint64_t serial_before,
                              const sgk_backend_ops *ops, const char *what)
{
    if (st != SGK_OK && error_serial == serial_before)
        return sgk_set_error(st, "backend %s: %s failed (%s)", ops->name, what,
                             sgk_status_string(st));
    return st;
}

sgk_status sgk_read_struct(const char *arg, const char *type, const char *init, const void *src,
                           size_t oldest, size_t size, void *dst)
{
    size_t got;
    memcpy(&got, src, sizeof got); /* struct_size leads every versioned struct */
    if (got < oldest)
        return sgk_set_error(SGK_ERR_INVALID_ARGUMENT,
                             "%s (%zu) is less than %zu, the size of the oldest %s that sgk %s "
                             "reads (sizeof(%s) is %zu); call %s first",
                             arg, got, oldest, type, sgk_version(), type, size, init);
    if (got > SGK_STRUCT_SIZE_MAX)
        return sgk_set_error(SGK_ERR_INVALID_ARGUMENT,
                             "%s (%zu) is larger than any version of %s can be (%d bytes; "
                             "sizeof(%s) is %zu in sgk %s); call %s first",
                             arg, got, type, SGK_STRUCT_SIZE_MAX, type, size, sgk_version(), init);
    const unsigned char *bytes = src;
    for (size_t i = size; i < got; i++)
        if (bytes[i] != 0)
            return sgk_set_error(SGK_ERR_UNSUPPORTED,
                                 "%s (%zu) is larger than sizeof(%s) (%zu) in sgk %s and byte %zu "
                                 "is nonzero: a field of a newer sgk.h is set, which this sgk "
                                 "cannot honour",
                                 arg, got, type, size, sgk_version(), i);
    /* dst holds the defaults (its _init); the caller's fields replace them. */
    memcpy(dst, src, got < size ? got : size);
    memcpy(dst, &size, sizeof size);
    return SGK_OK;
}
