"""sgk's C API through ctypes, on memory that PyTorch owns: the binding that
bench/torch_compare.py times sgk with. sgk_forward_device gets the tensors'
data_ptr() and PyTorch's current CUDA stream, so sgk runs where a model
would call it, with no copy; on CPU tensors sgk_forward does the work."""
import ctypes
import ctypes.util
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ContextOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("cpu_threads", ctypes.c_int)]


class LayerDesc(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t),
                ("dim", ctypes.c_int64), ("heads", ctypes.c_int64), ("pair_dim", ctypes.c_int64),
                ("eps", ctypes.c_float), ("dtype", ctypes.c_int)] + \
               [(n, ctypes.c_void_p) for n in ("ln_gamma", "ln_beta", "wq", "wk", "wv", "wo",
                                               "w1", "b1", "w2", "b2")]


SGK_MASK_F32 = 0
SGK_NATIVE_DEVICE_ORDINAL = 0


class SgkError(RuntimeError):
    pass


class Sgk:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        L = self.lib
        vp, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
        L.sgk_version.restype = ctypes.c_char_p
        L.sgk_last_error.restype = ctypes.c_char_p
        L.sgk_status_string.restype = ctypes.c_char_p
        L.sgk_status_string.argtypes = [i32]
        L.sgk_context_options_init.argtypes = [ctypes.POINTER(ContextOptions)]
        L.sgk_context_options_init.restype = None
        L.sgk_context_create.argtypes = [ctypes.c_char_p, i32, ctypes.POINTER(ContextOptions), ctypes.POINTER(vp)]
        L.sgk_context_destroy.argtypes = [vp]
        L.sgk_context_destroy.restype = None
        L.sgk_context_native.argtypes = [vp, i32, ctypes.POINTER(vp)]
        L.sgk_layer_desc_init.argtypes = [ctypes.POINTER(LayerDesc)]
        L.sgk_layer_desc_init.restype = None
        L.sgk_layer_create.argtypes = [vp, ctypes.POINTER(LayerDesc), ctypes.POINTER(vp)]
        L.sgk_layer_destroy.argtypes = [vp]
        L.sgk_layer_destroy.restype = None
        L.sgk_forward.argtypes = [vp, i64, i64, vp, vp, vp, i32, vp]
        L.sgk_forward_device.argtypes = [vp, i64, i64, vp, vp, vp, i32, vp, vp, ctypes.c_size_t, vp]
        L.sgk_workspace_size.argtypes = [vp, i64, i64, ctypes.POINTER(ctypes.c_size_t)]
        L.sgk_layer_variants.argtypes = [vp, i64, i64, ctypes.POINTER(ctypes.c_char_p),
                                         ctypes.POINTER(i32), i32, ctypes.POINTER(i32)]
        L.sgk_layer_set_variant.argtypes = [vp, ctypes.c_char_p]
        L.sgk_layer_variant_for.argtypes = [vp, i64, i64, ctypes.POINTER(ctypes.c_char_p)]
        L.sgk_device_name.argtypes = [ctypes.c_char_p, i32, ctypes.c_char_p, ctypes.c_size_t]
        for name in ("sgk_context_create", "sgk_context_native", "sgk_layer_create", "sgk_forward",
                     "sgk_forward_device", "sgk_workspace_size", "sgk_layer_variants",
                     "sgk_layer_set_variant", "sgk_layer_variant_for", "sgk_device_name"):
            getattr(L, name).restype = i32

    def check(self, status, what):
        if status != 0:
            raise SgkError(f"{what}: {self.lib.sgk_status_string(status).decode()}: "
                           f"{self.lib.sgk_last_error().decode()}")

    def version(self):
        return self.lib.sgk_version().decode()


def find_libsgk(explicit):
    if explicit:
        return explicit
    for build in ("build", "builddir", "_build"):
        for root in (os.getcwd(), REPO):
            p = os.path.join(root, build, "api", "libsgk.so")
            if os.path.exists(p):
                return p
    return ctypes.util.find_library("sgk")  # None when there is none


class SgkLayer:
    """One sgk context and layer holding the module's weights."""

    def __init__(self, sgk, backend, device_index, module, threads):
        import torch
        self.sgk, L = sgk, sgk.lib
        opts = ContextOptions()
        L.sgk_context_options_init(ctypes.byref(opts))
        opts.cpu_threads = threads
        self.ctx = ctypes.c_void_p()
        sgk.check(L.sgk_context_create(backend.encode(), device_index, ctypes.byref(opts),
                                       ctypes.byref(self.ctx)), f"sgk_context_create({backend})")
        sd = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in module.state_dict().items()}
        desc = LayerDesc()
        L.sgk_layer_desc_init(ctypes.byref(desc))
        desc.dim, desc.heads, desc.pair_dim = module.dim, module.num_heads, module.pair_dim
        desc.eps = module.norm.eps
        names = {"ln_gamma": "norm.weight", "ln_beta": "norm.bias", "wq": "q_proj.weight",
                 "wk": "k_proj.weight", "wv": "v_proj.weight", "wo": "out_proj.weight",
                 "w1": "rel_mlp.0.weight", "b1": "rel_mlp.0.bias", "w2": "rel_mlp.2.weight",
                 "b2": "rel_mlp.2.bias"}
        for field, key in names.items():
            setattr(desc, field, sd[key].data_ptr())  # host pointers, copied by sgk_layer_create
        self.layer = ctypes.c_void_p()
        sgk.check(L.sgk_layer_create(self.ctx, ctypes.byref(desc), ctypes.byref(self.layer)), "sgk_layer_create")

    def device_name(self, backend, index):
        buf = ctypes.create_string_buffer(256)
        if self.sgk.lib.sgk_device_name(backend.encode(), index, buf, 256) == 0:
            return buf.value.decode()
        return backend

    def variants(self, B, N):
        L = self.sgk.lib
        count = ctypes.c_int()
        self.sgk.check(L.sgk_layer_variants(self.layer, B, N, None, None, 0, ctypes.byref(count)), "sgk_layer_variants")
        names = (ctypes.c_char_p * count.value)()
        sup = (ctypes.c_int * count.value)()
        self.sgk.check(L.sgk_layer_variants(self.layer, B, N, names, sup, count.value, ctypes.byref(count)),
                       "sgk_layer_variants")
        auto = ctypes.c_char_p()
        self.sgk.check(L.sgk_layer_variant_for(self.layer, B, N, ctypes.byref(auto)), "sgk_layer_variant_for")
        return [(names[i].decode(), bool(sup[i])) for i in range(count.value)], auto.value.decode()

    def set_variant(self, name):
        self.sgk.check(self.sgk.lib.sgk_layer_set_variant(self.layer, name.encode() if name else None),
                       "sgk_layer_set_variant")

    def caller(self, nodes, pair, mask, out, on_cuda):
        """A function of no arguments that runs one forward on these tensors."""
        import torch
        L, B, N = self.sgk.lib, nodes.shape[0], nodes.shape[1]
        args = [ctypes.c_void_p(t.data_ptr()) for t in (nodes, pair, mask, out)]
        if not on_cuda:
            def run():
                self.sgk.check(L.sgk_forward(self.layer, B, N, args[0], args[1], args[2], SGK_MASK_F32, args[3]),
                               "sgk_forward")
            return run, None
        ws_bytes = ctypes.c_size_t()
        self.sgk.check(L.sgk_workspace_size(self.layer, B, N, ctypes.byref(ws_bytes)), "sgk_workspace_size")
        ws = torch.empty(max(1, ws_bytes.value), dtype=torch.uint8, device=nodes.device)
        ws_ptr, nbytes = ctypes.c_void_p(ws.data_ptr() if ws_bytes.value else None), ws_bytes.value

        def run():
            # Read at call time: inside torch.cuda.graph this is the capture stream.
            stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
            self.sgk.check(L.sgk_forward_device(self.layer, B, N, args[0], args[1], args[2], SGK_MASK_F32,
                                                args[3], ws_ptr, nbytes, stream), "sgk_forward_device")
        return run, ws  # keep the workspace alive as long as the caller

    def close(self):
        self.sgk.lib.sgk_layer_destroy(self.layer)
        self.sgk.lib.sgk_context_destroy(self.ctx)
