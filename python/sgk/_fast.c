/* sgk._fast: sgk.torch.RelationUpdate's inference call without Python
 * bytecode.
 *
 * At the shape a policy runs step after step, the module's Python path
 * (finding its ten weights and checking them for changes, checking three
 * inputs for shape, dtype, device and layout, then calling
 * sgk_forward_device through ctypes) costs several times the kernel. After
 * each call it makes, module.py records what it checked in a Plan;
 * forward() here repeats exactly those checks in C and, when every one
 * holds, makes the same call. When one does not (a weight was replaced or
 * written, another eps, shape, dtype or device, a stream capture that must
 * record the repack, a closed layer), it returns None and the Python path
 * runs, which checks, says what is wrong or repacks, and records a new
 * Plan. Nothing here decides anything the Python path does not.
 *
 * Plain CPython API: torch's tensors are used only through their Python
 * attributes, and sgk_forward_device is called through the address ctypes
 * resolved, so this module links neither libtorch nor libsgk.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

#define NWEIGHTS 10

/* o.name() without making a bound method first (vectorcall, 3.9+). */
#if PY_VERSION_HEX >= 0x03090000
#define CALL_METHOD(o, name) PyObject_VectorcallMethod((name), &(o), 1, NULL)
#else
#define CALL_METHOD(o, name) PyObject_CallMethodObjArgs((o), (name), NULL)
#endif

typedef int (*forward_device_fn)(void *layer, int64_t B, int64_t N, const void *nodes,
                                 const void *pair_feats, const void *edge_mask, int mask_type,
                                 void *out, void *workspace, size_t workspace_bytes,
                                 void *stream);

typedef struct {
    PyObject_HEAD
    forward_device_fn fn;
    PyObject *layer;             /* the sgk.Layer: its _layer is None once closed */
    void *handle;
    PyObject *weights[NWEIGHTS]; /* held, so that identity means the same tensor */
    void *ptrs[NWEIGHTS];
    long long versions[NWEIGHTS];
    double eps;
    long long device_index;      /* cuda: the device's index; cpu: -1 */
    PyObject *dtype, *mask_dtype;
    int mask_type;
    long long B, N, D, P, H;
    size_t workspace;
    PyObject *work;              /* cpu: the workspace, used under the lock; cuda: what makes
                                  * a new one (a callable: a call only enqueues); None: none */
    PyObject *stream_fn;         /* cuda: torch's current raw stream of an index; cpu: None */
    PyObject *capturing_fn;      /* a capture needs the Python path (it records the repack); else None */
    PyObject *lock;              /* the module's threading.Lock */
    PyObject *empty_like;
} Plan;

static PyObject *s_data_ptr, *s_version, *s_shape, *s_dtype, *s_is_contiguous,
    *s_is_cpu, *s_get_device, *s_acquire, *s_release, *s_layer, *s_modules,
    *s_parameters, *s_eps, *s_weight, *s_bias, *s_norm, *s_q_proj, *s_k_proj, *s_v_proj,
    *s_out_proj, *s_rel_mlp, *s_0, *s_2;

static void plan_dealloc(Plan *p)
{
    for (int i = 0; i < NWEIGHTS; i++)
        Py_XDECREF(p->weights[i]);
    PyObject *held[] = {p->layer, p->dtype, p->mask_dtype, p->work, p->stream_fn,
                        p->capturing_fn, p->lock, p->empty_like};
    for (size_t i = 0; i < sizeof held / sizeof held[0]; i++)
        Py_XDECREF(held[i]);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

/* The tensor's data_ptr() as a pointer; -1 with an exception set on error. */
static int data_ptr(PyObject *t, void **out)
{
    PyObject *v = CALL_METHOD(t, s_data_ptr);
    if (!v)
        return -1;
    *out = PyLong_AsVoidPtr(v);
    Py_DECREF(v);
    return PyErr_Occurred() ? -1 : 0;
}

static int version(PyObject *t, long long *out)
{
    PyObject *v = PyObject_GetAttr(t, s_version);
    if (!v)
        return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return PyErr_Occurred() ? -1 : 0;
}

/* Plan(forward_device_address, layer, handle, weights, ptrs, versions, eps,
 *      device_index, dtype, D, P, H, B, N, mask_dtype, mask_type,
 *      workspace, work, stream_fn, capturing_fn, lock, empty_like)
 * weights: the ten tensors the layer was packed from (in the order of
 * RelationUpdate._weights), with the data_ptr and version each had when it
 * was (tuples of ten ints). */
static PyObject *plan_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    unsigned long long fn, handle, workspace;
    PyObject *layer, *weights, *ptrs, *versions, *dtype, *mask_dtype, *work, *stream_fn,
        *capturing_fn, *lock, *empty_like;
    long long device_index, D, P, H, B, N;
    double eps;
    int mask_type;
    (void)kwds;
    if (!PyArg_ParseTuple(args, "KOKOOOdLOLLLLLOiKOOOOO", &fn, &layer, &handle, &weights,
                          &ptrs, &versions, &eps, &device_index, &dtype, &D, &P, &H, &B, &N,
                          &mask_dtype, &mask_type, &workspace, &work, &stream_fn, &capturing_fn,
                          &lock, &empty_like))
        return NULL;
    if (!PyList_Check(weights) || PyList_GET_SIZE(weights) != NWEIGHTS || !PyTuple_Check(ptrs) ||
        PyTuple_GET_SIZE(ptrs) != NWEIGHTS || !PyTuple_Check(versions) ||
        PyTuple_GET_SIZE(versions) != NWEIGHTS) {
        PyErr_SetString(PyExc_ValueError,
                        "sgk._fast.Plan: weights must be a list of ten tensors, ptrs and versions "
                        "tuples of ten ints");
        return NULL;
    }
    Plan *p = (Plan *)type->tp_alloc(type, 0);
    if (!p)
        return NULL;
    p->fn = (forward_device_fn)(uintptr_t)fn;
    p->handle = (void *)(uintptr_t)handle;
    p->eps = eps;
    p->device_index = device_index;
    p->D = D, p->P = P, p->H = H, p->B = B, p->N = N;
    p->mask_type = mask_type;
    p->workspace = (size_t)workspace;
#define KEEP(field) (Py_INCREF(field), p->field = (field))
    KEEP(layer), KEEP(dtype), KEEP(mask_dtype), KEEP(work), KEEP(stream_fn);
    KEEP(capturing_fn), KEEP(lock), KEEP(empty_like);
#undef KEEP
    for (int i = 0; i < NWEIGHTS; i++) {
        PyObject *w = PyList_GET_ITEM(weights, i);
        Py_INCREF(w);
        p->weights[i] = w;
        p->ptrs[i] = PyLong_AsVoidPtr(PyTuple_GET_ITEM(ptrs, i));
        p->versions[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(versions, i));
        if (PyErr_Occurred()) {
            Py_DECREF(p);
            return NULL;
        }
    }
    return (PyObject *)p;
}

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sgk._fast.Plan",
    .tp_basicsize = sizeof(Plan),
    .tp_dealloc = (destructor)plan_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "What sgk.torch checked and packed at its last call: see sgk/_fast.c.",
    .tp_new = plan_new,
};

/* d[name] of the dict attribute attr of o, borrowed (the dict, which o
 * holds, holds it); NULL with no exception where there is none. */
static PyObject *member(PyObject *o, PyObject *attr, PyObject *name)
{
    PyObject *d = PyObject_GetAttr(o, attr);
    if (!d)
        return NULL;
    PyObject *v = PyDict_Check(d) ? PyDict_GetItemWithError(d, name) : NULL;
    Py_DECREF(d);
    return v;
}

/* The module's ten weights in RelationUpdate._weights' order (borrowed)
 * and its norm; 0 where one is missing, -1 on error. */
static int module_weights(PyObject *module, PyObject **w, PyObject **norm)
{
    PyObject *mlp, *m, *l0, *l2;
    PyObject *proj[4] = {s_q_proj, s_k_proj, s_v_proj, s_out_proj};
    if (!(*norm = member(module, s_modules, s_norm)) || !(mlp = member(module, s_modules, s_rel_mlp)) ||
        !(l0 = member(mlp, s_modules, s_0)) || !(l2 = member(mlp, s_modules, s_2)))
        return PyErr_Occurred() ? -1 : 0;
    if (!(w[0] = member(*norm, s_parameters, s_weight)) || !(w[1] = member(*norm, s_parameters, s_bias)))
        return PyErr_Occurred() ? -1 : 0;
    for (int i = 0; i < 4; i++)
        if (!(m = member(module, s_modules, proj[i])) || !(w[2 + i] = member(m, s_parameters, s_weight)))
            return PyErr_Occurred() ? -1 : 0;
    if (!(w[6] = member(l0, s_parameters, s_weight)) || !(w[7] = member(l0, s_parameters, s_bias)) ||
        !(w[8] = member(l2, s_parameters, s_weight)) || !(w[9] = member(l2, s_parameters, s_bias)))
        return PyErr_Occurred() ? -1 : 0;
    return 1;
}

/* 1 when t's shape is dims[0..n), 0 when not, -1 on error. */
static int shape_is(PyObject *t, const long long *dims, int n)
{
    PyObject *s = PyObject_GetAttr(t, s_shape);
    if (!s)
        return -1;
    int ok = PyTuple_Check(s) && PyTuple_GET_SIZE(s) == n;
    for (int i = 0; ok && i < n; i++) {
        long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(s, i));
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(s);
            return -1;
        }
        ok = v == dims[i];
    }
    Py_DECREF(s);
    return ok;
}

/* 1 when t's attribute name is want, 0 when not, -1 on error. */
static int attr_is(PyObject *t, PyObject *name, PyObject *want)
{
    PyObject *v = PyObject_GetAttr(t, name);
    if (!v)
        return -1;
    int ok = v == want;
    Py_DECREF(v);
    return ok;
}

/* 1 when t.name() is true, 0 when not, -1 on error. */
static int method_true(PyObject *t, PyObject *name)
{
    PyObject *v = CALL_METHOD(t, name);
    if (!v)
        return -1;
    int ok = PyObject_IsTrue(v);
    Py_DECREF(v);
    return ok;
}

/* 1 when t is on the plan's device, 0 when not, -1 on error: one read
 * each way (get_device() is the index of a CUDA tensor's device and -1
 * for every other kind). */
static int on_device(Plan *p, PyObject *t)
{
    if (p->device_index < 0)
        return attr_is(t, s_is_cpu, Py_True);
    PyObject *v = CALL_METHOD(t, s_get_device);
    if (!v)
        return -1;
    long long index = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (index == -1 && PyErr_Occurred())
        return -1;
    return index == p->device_index;
}

/* 1 when the plan holds for this module and these inputs, 0 when not, -1
 * on error. */
static int holds(Plan *p, PyObject *module, PyObject *const *in)
{
    PyObject *w[NWEIGHTS], *norm;
    int r = module_weights(module, w, &norm);
    if (r != 1)
        return r;
    for (int i = 0; i < NWEIGHTS; i++) {
        void *ptr;
        long long v;
        if (w[i] != p->weights[i])
            return 0;
        if (data_ptr(w[i], &ptr) || version(w[i], &v))
            return -1;
        if (ptr != p->ptrs[i] || v != p->versions[i])
            return 0;
    }
    PyObject *eps = PyObject_GetAttr(norm, s_eps);
    if (!eps)
        return -1;
    double e = PyFloat_AsDouble(eps);
    Py_DECREF(eps);
    if (e == -1.0 && PyErr_Occurred())
        return -1;
    if (e != p->eps)
        return 0;
    PyObject *open = PyObject_GetAttr(p->layer, s_layer);
    if (!open)
        return -1;
    Py_DECREF(open);
    if (open == Py_None)
        return 0;
    const long long dims[3][4] = {{p->B, p->N, p->D}, {p->B, p->N, p->N, p->P}, {p->B, p->N, p->N}};
    const int rank[3] = {3, 4, 3};
    for (int i = 0; i < 3; i++) {
        if ((r = shape_is(in[i], dims[i], rank[i])) != 1 ||
            (r = attr_is(in[i], s_dtype, i == 2 ? p->mask_dtype : p->dtype)) != 1 ||
            (r = on_device(p, in[i])) != 1 || (r = method_true(in[i], s_is_contiguous)) != 1)
            return r;
    }
    if (p->capturing_fn != Py_None) {
        PyObject *c = PyObject_CallFunctionObjArgs(p->capturing_fn, NULL);
        if (!c)
            return -1;
        r = PyObject_IsTrue(c);
        Py_DECREF(c);
        if (r != 0)
            return r < 0 ? -1 : 0;
    }
    return 1;
}

/* forward(plan, module, nodes, pair_feats, edge_mask) -> out, or None when
 * the plan does not hold (the caller then takes its Python path), or the
 * sgk status (an int) when the call failed. */
static PyObject *fast_forward(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 5 || Py_TYPE(args[0]) != &PlanType) {
        PyErr_SetString(PyExc_TypeError,
                        "sgk._fast.forward(plan, module, nodes, pair_feats, edge_mask)");
        return NULL;
    }
    Plan *p = (Plan *)args[0];
    PyObject *const *in = args + 2;
    int r = holds(p, args[1], in);
    if (r != 1) {
        if (r < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    void *stream = NULL;
    if (p->stream_fn != Py_None) {
        PyObject *s = PyObject_CallFunction(p->stream_fn, "L", p->device_index);
        if (!s)
            return NULL;
        stream = PyLong_AsVoidPtr(s);
        Py_DECREF(s);
        if (PyErr_Occurred())
            return NULL;
    }
    void *ptr[3], *out_ptr, *work_ptr = NULL;
    if (data_ptr(in[0], &ptr[0]) || data_ptr(in[1], &ptr[1]) || data_ptr(in[2], &ptr[2]))
        return NULL;
    PyObject *out = PyObject_CallFunctionObjArgs(p->empty_like, in[0], NULL), *work = NULL;
    if (!out)
        return NULL;
    if (data_ptr(out, &out_ptr))
        goto fail;
    if (p->workspace) {
        /* cpu: the plan's own, since the call ends before the lock is
         * released; cuda: a new one, which the caching allocator keeps
         * for the stream's later work */
        work = PyCallable_Check(p->work) ? PyObject_CallFunctionObjArgs(p->work, NULL)
                                         : (Py_INCREF(p->work), p->work);
        if (!work || data_ptr(work, &work_ptr))
            goto fail;
    }
    PyObject *held = CALL_METHOD(p->lock, s_acquire);
    if (!held)
        goto fail;
    Py_DECREF(held);
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = p->fn(p->handle, p->B, p->N, ptr[0], ptr[1], ptr[2], p->mask_type, out_ptr, work_ptr,
                   p->workspace, stream);
    Py_END_ALLOW_THREADS
    held = CALL_METHOD(p->lock, s_release);
    if (!held)
        goto fail;
    Py_DECREF(held);
    Py_XDECREF(work);
    if (status != 0) {
        Py_DECREF(out);
        return PyLong_FromLong(status);
    }
    return out;
fail:
    Py_XDECREF(work);
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"forward", (PyCFunction)(void (*)(void))fast_forward, METH_FASTCALL,
     "forward(plan, module, nodes, pair_feats, edge_mask) -> out, None (the plan does not "
     "hold) or an sgk status (the call failed)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fast",
    "sgk.torch's inference call in C (see sgk/_fast.c)", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fast(void)
{
    struct { PyObject **slot; const char *name; } names[] = {
        {&s_data_ptr, "data_ptr"}, {&s_version, "_version"}, {&s_shape, "shape"},
        {&s_dtype, "dtype"}, {&s_is_contiguous, "is_contiguous"},
        {&s_is_cpu, "is_cpu"}, {&s_get_device, "get_device"},
        {&s_acquire, "acquire"}, {&s_release, "release"}, {&s_layer, "_layer"},
        {&s_modules, "_modules"}, {&s_parameters, "_parameters"}, {&s_eps, "eps"},
        {&s_weight, "weight"}, {&s_bias, "bias"}, {&s_norm, "norm"}, {&s_q_proj, "q_proj"},
        {&s_k_proj, "k_proj"}, {&s_v_proj, "v_proj"}, {&s_out_proj, "out_proj"},
        {&s_rel_mlp, "rel_mlp"}, {&s_0, "0"}, {&s_2, "2"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!(*names[i].slot = PyUnicode_InternFromString(names[i].name)))
            return NULL;
    if (PyType_Ready(&PlanType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&PlanType);
    if (PyModule_AddObject(m, "Plan", (PyObject *)&PlanType) < 0) {
        Py_DECREF(&PlanType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
