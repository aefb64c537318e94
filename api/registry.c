/* The backend registry: built once, on first use, in a fixed order. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "sgk_internal.h"

enum { SGK_BACKEND_SLOTS = 4 };

static sgk_backend_slot slots[SGK_BACKEND_SLOTS] = {
    { .name = "cpu" }, { .name = "cuda" }, { .name = "hip" }, { .name = "opencl" },
};
static pthread_once_t registry_once = PTHREAD_ONCE_INIT;

static const sgk_host host_services = {
    .abi_version = SGK_BACKEND_ABI,
    .set_error = sgk_set_error,
    .alloc_should_fail = sgk_fault_should_fail,
};

const sgk_host *sgk_host_services(void)
{
    return &host_services;
}

static void probe_slot(sgk_backend_slot *slot)
{
    char reason[SGK_REASON_MAX] = "";
    int count = slot->ops->probe(reason, sizeof reason);
    if (count > 0) {
        slot->available = 1;
        slot->device_count = count;
        slot->reason[0] = '\0';
        return;
    }
    reason[sizeof reason - 1] = '\0';
    snprintf(slot->reason, sizeof slot->reason, "%s",
             reason[0] ? reason : "the backend found no device");
}

static void build_registry(void)
{
    /* Built once for the process: an allocation failure injected by a test
     * must not make a backend look unavailable for good. */
    sgk_fault_suspend(1);
    for (int i = 0; i < SGK_BACKEND_SLOTS; i++) {
        sgk_backend_slot *slot = &slots[i];
        const sgk_backend_ops *ops;
        if (i == 0) {
            ops = sgk_cpu_backend_entry(&host_services);
            if (!sgk_ops_usable(ops, slot->name, "built-in cpu backend", slot->reason,
                                sizeof slot->reason))
                ops = NULL;
        } else {
            ops = sgk_plugin_load(slot->name, &host_services, slot->reason, sizeof slot->reason);
        }
        slot->ops = ops;
        if (ops)
            probe_slot(slot);
    }
    sgk_fault_suspend(0);
}

static void ensure_registry(void)
{
    pthread_once(&registry_once, build_registry);
}

int sgk_registry_count(void)
{
    return SGK_BACKEND_SLOTS;
}

const sgk_backend_slot *sgk_registry_at(int index)
{
    if (index < 0 || index >= SGK_BACKEND_SLOTS)
        return NULL;
    ensure_registry();
    return &slots[index];
}

const sgk_backend_slot *sgk_registry_find(const char *name)
{
    if (name == NULL)
        return NULL;
    ensure_registry();
    for (int i = 0; i < SGK_BACKEND_SLOTS; i++)
        if (strcmp(slots[i].name, name) == 0)
            return &slots[i];
    return NULL;
}

sgk_status sgk_registry_require(const char *name, const char *arg,
                                const sgk_backend_slot **slot)
{
    if (name == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "%s is NULL", arg);
    const sgk_backend_slot *s = sgk_registry_find(name);
    if (s == NULL)
        return sgk_set_error(SGK_ERR_UNKNOWN_BACKEND,
                             "%s \"%.64s\" is not an sgk backend (known: cpu, cuda, hip, opencl)",
                             arg, name);
    if (!s->available)
        return sgk_set_error(SGK_ERR_BACKEND_UNAVAILABLE, "backend %s is unavailable: %s",
                             s->name, s->reason);
    *slot = s;
    return SGK_OK;
}

sgk_status sgk_registry_check_device(const sgk_backend_slot *slot, int device)
{
    if (device < 0 || device >= slot->device_count)
        return sgk_set_error(SGK_ERR_INVALID_DEVICE,
                             "device %d is out of range: backend %s has %d device%s (0 .. %d)",
                             device, slot->name, slot->device_count,
                             slot->device_count == 1 ? "" : "s", slot->device_count - 1);
    return SGK_OK;
}

static void fill_info(const sgk_backend_slot *slot, sgk_backend_info *info)
{
    info->name = slot->name;
    info->available = slot->available;
    info->device_count = slot->available ? slot->device_count : 0;
    info->reason = slot->reason;
}

SGK_EXPORT int sgk_backend_count(void)
{
    return SGK_BACKEND_SLOTS;
}

SGK_EXPORT sgk_status sgk_backend_get(int index, sgk_backend_info *info)
{
    if (info == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "info is NULL");
    if (index < 0 || index >= SGK_BACKEND_SLOTS)
        return sgk_set_error(SGK_ERR_INVALID_ARGUMENT,
                             "index must be in [0, %d) (sgk_backend_count), got %d",
                             SGK_BACKEND_SLOTS, index);
    fill_info(sgk_registry_at(index), info);
    return SGK_OK;
}

SGK_EXPORT sgk_status sgk_backend_find(const char *name, sgk_backend_info *info)
{
    if (name == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "name is NULL");
    if (info == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "info is NULL");
    const sgk_backend_slot *slot = sgk_registry_find(name);
    if (slot == NULL)
        return sgk_set_error(SGK_ERR_UNKNOWN_BACKEND,
                             "name \"%.64s\" is not an sgk backend (known: cpu, cuda, hip, opencl)",
                             name);
    fill_info(slot, info);
    return SGK_OK;
}

SGK_EXPORT sgk_status sgk_device_name(const char *backend, int device, char *buf, size_t buf_len)
{
    if (buf == NULL)
        return sgk_set_error(SGK_ERR_NULL_POINTER, "buf is NULL");
    if (buf_len == 0)
        return sgk_set_error(SGK_ERR_INVALID_ARGUMENT, "buf_len must be >= 1, got 0");
    const sgk_backend_slot *slot;
    sgk_status st = sgk_registry_require(backend, "backend", &slot);
    if (st != SGK_OK)
        return st;
    st = sgk_registry_check_device(slot, device);
    if (st != SGK_OK)
        return st;
    /* Through a local buffer so that buf is untouched if the backend fails. */
    char name[256] = "";
    uint64_t serial = sgk_error_serial();
    st = sgk_backend_result(slot->ops->device_name(device, name, sizeof name), serial,
                            slot->ops, "device_name");
    if (st != SGK_OK)
        return st;
    name[sizeof name - 1] = '\0';
    size_t need = strlen(name) + 1;
    if (need > buf_len)
        return sgk_set_error(SGK_ERR_INVALID_ARGUMENT,
                             "buf_len (%zu) is too small for the name of %s device %d, which "
                             "needs %zu bytes with its terminating NUL",
                             buf_len, slot->name, device, need);
    memcpy(buf, name, need);
    return SGK_OK;
}
