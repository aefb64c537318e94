"""sgk: scene-graph kernels from Python (numpy, over the C library).

    import sgk
    sgk.backends()              # [Backend(name='cpu', available=True, ...), ...]
    with sgk.Layer("cpu", state_dict) as layer:
        out = layer.forward(nodes, pair_feats, edge_mask)

libsgk is loaded on first use from $SGK_LIBRARY when that is set (and from
nowhere else then); otherwise from _native/libsgk.so inside this package
(where pip install puts it), then the system's,
ctypes.util.find_library('sgk'). Failing that, sgk.Error names each place.
"""
import ctypes
from collections import namedtuple

from . import _lib
from ._lib import Error, check
from .layer import Layer, Variant, from_bfloat16_bits, to_bfloat16_bits

__all__ = ["Error", "Layer", "Variant", "Backend", "backends", "device_name", "version", "to_bfloat16_bits",
           "from_bfloat16_bits"]

Backend = namedtuple("Backend", "name available device_count reason")


def version():
    """libsgk's version string, e.g. "0.2.0"."""
    return _lib.lib().sgk_version().decode()


def backends():
    """Every backend sgk knows, in its fixed order, as Backend(name,
    available, device_count, reason); reason says why one is unavailable
    ("" when available)."""
    lib = _lib.lib()
    out = []
    for i in range(lib.sgk_backend_count()):
        info = _lib.BackendInfo()
        check(lib.sgk_backend_get(i, ctypes.byref(info)))
        out.append(Backend(info.name.decode(), bool(info.available), info.device_count,
                           (info.reason or b"").decode(errors="replace")))
    return out


def device_name(backend, device=0):
    """The name of a backend's device, e.g. "NVIDIA H200"."""
    buf = ctypes.create_string_buffer(256)
    check(_lib.lib().sgk_device_name(str(backend).encode(), int(device), buf, len(buf)))
    return buf.value.decode(errors="replace")
