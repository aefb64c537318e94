"""Finding libsgk and declaring its C functions (ctypes).

The library is loaded on first use, not at import, so that ``import sgk``
always works and a missing library is reported as an sgk.Error that names
every place looked in.
"""
import ctypes
import ctypes.util
import os
import threading

# The names of the sgk_status enum in api/sgk.h, by value. sgk_status_string
# gives a description; these are the names a caller can match on.
STATUS_NAMES = {
    0: "SGK_OK",
    1: "SGK_ERR_NULL_POINTER",
    2: "SGK_ERR_INVALID_ARGUMENT",
    3: "SGK_ERR_SIZE_OVERFLOW",
    4: "SGK_ERR_UNSUPPORTED",
    5: "SGK_ERR_UNKNOWN_BACKEND",
    6: "SGK_ERR_BACKEND_UNAVAILABLE",
    7: "SGK_ERR_INVALID_DEVICE",
    8: "SGK_ERR_UNKNOWN_VARIANT",
    9: "SGK_ERR_OUT_OF_MEMORY",
    10: "SGK_ERR_BACKEND",
    11: "SGK_ERR_INSUFFICIENT_WORKSPACE",
}

MASK_F32 = 0
MASK_U8 = 1
DTYPE_F32, DTYPE_BF16, DTYPE_F16 = 0, 1, 2


class Error(Exception):
    """A failed sgk call.

    status: the status name, e.g. "SGK_ERR_INVALID_ARGUMENT" (None when
        libsgk itself could not be loaded);
    code: the status value (None when libsgk could not be loaded);
    description: sgk_status_string of the status;
    message: sgk_last_error(), which names the argument and the rule.
    """

    def __init__(self, status, code, description, message):
        self.status, self.code = status, code
        self.description, self.message = description, message
        head = status if status is not None else "sgk"
        super().__init__(f"{head}: {message}" if message else f"{head}: {description}")


class BackendInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("available", ctypes.c_int),
                ("device_count", ctypes.c_int), ("reason", ctypes.c_char_p)]


_p = ctypes.c_void_p
_i64 = ctypes.c_int64


class ContextOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("cpu_threads", ctypes.c_int)]


class LayerDesc(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("dim", _i64), ("heads", _i64),
                ("pair_dim", _i64), ("eps", ctypes.c_float), ("dtype", ctypes.c_int),
                ("ln_gamma", _p), ("ln_beta", _p), ("wq", _p), ("wk", _p), ("wv", _p),
                ("wo", _p), ("w1", _p), ("b1", _p), ("w2", _p), ("b2", _p)]


class Grads(ctypes.Structure):
    """sgk_grads: where sgk_backward writes each gradient (NULL: not wanted)."""
    _fields_ = [("nodes", _p), ("pair_feats", _p), ("ln_gamma", _p), ("ln_beta", _p),
                ("wq", _p), ("wk", _p), ("wv", _p), ("wo", _p), ("w1", _p), ("b1", _p),
                ("w2", _p), ("b2", _p)]


def layer_desc(dim, pair_dim, heads, eps, pointers, dtype=DTYPE_F32):
    """An sgk_layer_desc of dtype (DTYPE_*) whose weight fields are
    pointers, a mapping from field name (ln_gamma, wq, ...) to address."""
    desc = LayerDesc()
    lib().sgk_layer_desc_init(ctypes.byref(desc))
    desc.dim, desc.pair_dim, desc.heads = dim, pair_dim, heads
    desc.eps = eps
    desc.dtype = dtype
    for field, ptr in pointers.items():
        setattr(desc, field, ptr)
    return desc


def _candidates():
    """(place, path) pairs in the order they are tried, before the system's
    libsgk (ctypes.util.find_library), which lib() tries last."""
    env = os.environ.get("SGK_LIBRARY")
    if env:
        # Set on purpose: a wrong path is an error, not a reason to load
        # some other libsgk.
        return [("SGK_LIBRARY", env)]
    # pip install puts libsgk in sgk/_native, its plugins in _native/sgk,
    # where libsgk looks for them (sgk/ beside its own file).
    here = os.path.dirname(os.path.abspath(__file__))
    return [("inside the package", os.path.join(here, "_native", "libsgk.so"))]


def _declare(lib):
    c_int, c_char_p, st = ctypes.c_int, ctypes.c_char_p, ctypes.c_int
    protos = {
        "sgk_version": (c_char_p, []),
        "sgk_status_string": (c_char_p, [st]),
        "sgk_last_error": (c_char_p, []),
        "sgk_backend_count": (c_int, []),
        "sgk_backend_get": (st, [c_int, ctypes.POINTER(BackendInfo)]),
        "sgk_device_name": (st, [c_char_p, c_int, c_char_p, ctypes.c_size_t]),
        "sgk_context_options_init": (None, [ctypes.POINTER(ContextOptions)]),
        "sgk_context_create": (st, [c_char_p, c_int, ctypes.POINTER(ContextOptions),
                                    ctypes.POINTER(_p)]),
        "sgk_context_destroy": (None, [_p]),
        "sgk_layer_desc_init": (None, [ctypes.POINTER(LayerDesc)]),
        "sgk_layer_create": (st, [_p, ctypes.POINTER(LayerDesc), ctypes.POINTER(_p)]),
        "sgk_layer_destroy": (None, [_p]),
        "sgk_layer_set_weights": (st, [_p, ctypes.POINTER(LayerDesc)]),
        "sgk_layer_set_weights_device": (st, [_p, ctypes.POINTER(LayerDesc), _p]),
        "sgk_forward": (st, [_p, _i64, _i64, _p, _p, _p, c_int, _p]),
        "sgk_workspace_size": (st, [_p, _i64, _i64, ctypes.POINTER(ctypes.c_size_t)]),
        "sgk_forward_device": (st, [_p, _i64, _i64, _p, _p, _p, c_int, _p, _p,
                                    ctypes.c_size_t, _p]),
        "sgk_saved_size": (st, [_p, _i64, _i64, ctypes.POINTER(ctypes.c_size_t)]),
        "sgk_forward_train": (st, [_p, _i64, _i64, _p, _p, _p, c_int, _p, _p]),
        "sgk_backward": (st, [_p, _i64, _i64, _p, _p, _p, c_int, _p, _p, ctypes.POINTER(Grads)]),
        "sgk_train_workspace_size": (st, [_p, _i64, _i64, ctypes.POINTER(ctypes.c_size_t)]),
        "sgk_forward_train_device": (st, [_p, _i64, _i64, _p, _p, _p, c_int, _p, _p, _p,
                                          ctypes.c_size_t, _p]),
        "sgk_backward_device": (st, [_p, _i64, _i64, _p, _p, _p, c_int, _p, _p,
                                     ctypes.POINTER(Grads), _p, ctypes.c_size_t, _p]),
        "sgk_layer_variants": (st, [_p, _i64, _i64, ctypes.POINTER(c_char_p),
                                    ctypes.POINTER(c_int), c_int, ctypes.POINTER(c_int)]),
        "sgk_layer_set_variant": (st, [_p, c_char_p]),
        "sgk_layer_variant_for": (st, [_p, _i64, _i64, ctypes.POINTER(c_char_p)]),
    }
    for name, (res, args) in protos.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


_lock = threading.Lock()
_lib = None


def lib():
    """The loaded libsgk, loading it on the first call; sgk.Error if none loads."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            tried = []
            for place, path in _candidates():
                if not os.path.exists(path):
                    tried.append(f"{place}: {path} (not there)")
                    continue
                try:
                    _lib = _declare(ctypes.CDLL(path))
                    break
                except (OSError, AttributeError) as e:
                    tried.append(f"{place}: {path} ({e})")
            if _lib is None and not os.environ.get("SGK_LIBRARY"):
                found = ctypes.util.find_library("sgk")
                if found is None:
                    tried.append("ctypes.util.find_library('sgk') (found nothing)")
                else:
                    try:
                        _lib = _declare(ctypes.CDLL(found))
                    except (OSError, AttributeError) as e:
                        tried.append(f"ctypes.util.find_library('sgk'): {found} ({e})")
            if _lib is None:
                raise Error(None, None, "libsgk not found",
                            "could not load libsgk; tried " + "; ".join(tried)
                            + ". Set SGK_LIBRARY to the path of libsgk.so.")
    return _lib


def check(status):
    """Raise sgk.Error for a status other than SGK_OK."""
    if status != 0:
        l = lib()
        raise Error(STATUS_NAMES.get(status, f"status {status}"), status,
                    l.sgk_status_string(status).decode(),
                    l.sgk_last_error().decode(errors="replace"))
