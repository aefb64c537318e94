"""sgk.Layer: one relation-update layer (SPEC section 1) on an sgk backend."""
import ctypes
from collections import namedtuple

import numpy as np

from . import _lib
from ._lib import Error, check

Variant = namedtuple("Variant", "name supported")

# State-dict name -> (sgk_layer_desc field, shape in terms of D, P, H), in the
# names of sgk.torch.reference.RelationUpdate.
WEIGHTS = {
    "norm.weight": ("ln_gamma", ("D",)),
    "norm.bias": ("ln_beta", ("D",)),
    "q_proj.weight": ("wq", ("D", "D")),
    "k_proj.weight": ("wk", ("D", "D")),
    "v_proj.weight": ("wv", ("D", "D")),
    "out_proj.weight": ("wo", ("D", "D")),
    "rel_mlp.0.weight": ("w1", ("P", "P")),
    "rel_mlp.0.bias": ("b1", ("P",)),
    "rel_mlp.2.weight": ("w2", ("H", "P")),
    "rel_mlp.2.bias": ("b2", ("H",)),
}


# The layer dtypes: name -> (sgk_dtype, numpy dtype of its arrays). numpy
# has no bfloat16: a bfloat16 layer's nodes, pair_feats and out are uint16
# arrays of bfloat16 bit patterns (what torch's .view(torch.int16) gives).
DTYPES = {"float32": (_lib.DTYPE_F32, np.dtype(np.float32)),
          "float16": (_lib.DTYPE_F16, np.dtype(np.float16)),
          "bfloat16": (_lib.DTYPE_BF16, np.dtype(np.uint16))}


def to_bfloat16_bits(a):
    """float32 values as bfloat16 bit patterns (uint16), rounded to nearest,
    ties to even; NaN stays a quiet NaN with its sign (kernels/dtype.h)."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return np.where(nan, (u >> 16) | 0x40, r).astype(np.uint16)


def from_bfloat16_bits(h):
    """bfloat16 bit patterns (uint16) as float32 values (exact)."""
    return (np.asarray(h, np.uint16).astype(np.uint32) << 16).view(np.float32)


def _dtype(dtype):
    name = str(np.dtype(dtype)) if not isinstance(dtype, str) else dtype
    if name not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: must be one of {', '.join(DTYPES)}")
    return name


def _weight(weights, key, dtype):
    if key not in weights:
        raise ValueError(f"weights lacks {key!r} (needed: {', '.join(WEIGHTS)})")
    a = np.asarray(weights[key])
    if a.dtype.kind not in "fiu":
        raise TypeError(f"weights[{key!r}] has dtype {a.dtype}: must be real numbers (converted to {dtype})")
    if dtype == "bfloat16":
        return (np.require(a, np.uint16, ["C_CONTIGUOUS", "ALIGNED"]) if a.dtype == np.uint16
                else to_bfloat16_bits(a.astype(np.float32)))
    return np.require(a, DTYPES[dtype][1], ["C_CONTIGUOUS", "ALIGNED"])


def _array(name, a, ndim, dtypes):
    a = np.asarray(a)
    if a.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got {a.ndim} (shape {a.shape})")
    if a.dtype not in dtypes:
        raise TypeError(f"{name} has dtype {a.dtype}: must be {' or '.join(str(np.dtype(d)) for d in dtypes)}")
    return a


class Layer:
    """Layer(backend, weights, *, device=0, eps=1e-5, cpu_threads=0, dtype="float32")

    backend: a name from sgk.backends(), e.g. "cpu" or "opencl".
    weights: a mapping with the state-dict names of
        sgk.torch.reference.RelationUpdate (norm.weight, norm.bias,
        q_proj.weight, k_proj.weight, v_proj.weight, out_proj.weight,
        rel_mlp.0.weight, rel_mlp.0.bias, rel_mlp.2.weight, rel_mlp.2.bias),
        each anything numpy.asarray takes (a torch tensor must be moved to
        the CPU first). dim, pair_dim and heads come from their shapes;
        heads = rel_mlp.2.weight.shape[0]. Weights are converted to the
        layer's dtype, C-contiguous, where they are not already, and sgk
        copies them again when the layer is made, so the caller may free
        them after.

    dtype: "float32", "float16" or "bfloat16" (SGK_DTYPE_F32, F16, BF16),
        the type of the weights and of nodes, pair_feats and out; fp32
        arithmetic inside, out rounded to nearest. numpy has no bfloat16, so
        a bfloat16 layer takes and returns uint16 arrays of bfloat16 bit
        patterns (to_bfloat16_bits, from_bfloat16_bits; torch's
        .view(torch.int16)), and takes a uint16 weight as such bits too.
        Backends that run only float32 raise sgk.Error (SGK_ERR_UNSUPPORTED).

    cpu_threads: the cpu backend's OpenMP threads (0: OpenMP's default).

    Shapes are checked here (ValueError naming the key, expected and got);
    rules of the library itself (heads dividing dim, eps >= 0, backend
    names) come back from C as sgk.Error.

    Use as a context manager or call close(); the C objects are freed once,
    by close() or when the Layer is collected.
    """

    def __init__(self, backend, weights, *, device=0, eps=1e-5, cpu_threads=0, dtype="float32"):
        self._layer = self._ctx = None
        self._lib = lib = _lib.lib()
        self.dtype = _dtype(dtype)
        desc, arrays, sizes = self._desc(weights, eps)
        self.dim, self.pair_dim, self.heads = sizes["D"], sizes["P"], sizes["H"]
        self.backend, self.device, self.eps = backend, device, eps

        opts = _lib.ContextOptions()
        lib.sgk_context_options_init(ctypes.byref(opts))
        opts.cpu_threads = int(cpu_threads)
        ctx = ctypes.c_void_p()
        check(lib.sgk_context_create(str(backend).encode(), int(device), ctypes.byref(opts),
                                     ctypes.byref(ctx)))
        self._ctx = ctx
        layer = ctypes.c_void_p()
        try:
            check(lib.sgk_layer_create(ctx, ctypes.byref(desc), ctypes.byref(layer)))
        except Error:
            self.close()
            raise
        self._layer = layer

    def _desc(self, weights, eps):
        """(sgk_layer_desc, the arrays of the layer's dtype it points at,
        {D, P, H}) for weights; the arrays must outlive every use of the
        descriptor."""
        extra = sorted(set(weights) - set(WEIGHTS))
        if extra:
            raise ValueError(f"weights has unknown keys {extra} (known: {', '.join(WEIGHTS)})")
        arrays = {key: _weight(weights, key, self.dtype) for key in WEIGHTS}
        for key, (_, dims) in WEIGHTS.items():
            if arrays[key].ndim != len(dims):
                raise ValueError(f"weights[{key!r}] must have {len(dims)} dimensions "
                                 f"({', '.join(dims)}), got shape {arrays[key].shape}")
        sizes = {"D": arrays["norm.weight"].shape[0], "P": arrays["rel_mlp.0.weight"].shape[1],
                 "H": arrays["rel_mlp.2.weight"].shape[0]}
        for key, (_, dims) in WEIGHTS.items():
            want = tuple(sizes[d] for d in dims)
            if arrays[key].shape != want:
                named = "(" + ", ".join(f"{d}={sizes[d]}" for d in dims) + ")"
                raise ValueError(f"weights[{key!r}] must have shape {named} = {want}, "
                                 f"got {arrays[key].shape}")
        desc = _lib.layer_desc(sizes["D"], sizes["P"], sizes["H"], eps,
                               {field: arrays[key].ctypes.data for key, (field, _) in WEIGHTS.items()},
                               DTYPES[self.dtype][0])
        return desc, arrays, sizes

    def set_weights(self, weights, *, eps=None):
        """Replace the layer's weights with weights (the state-dict mapping
        of the constructor, numpy arrays or anything numpy.asarray takes),
        without building the layer again: after a training step or
        load_state_dict. dim, pair_dim and heads must be the layer's
        (sgk.Error SGK_ERR_INVALID_ARGUMENT otherwise; the shapes among the
        weights are checked here, as in the constructor). eps: None keeps
        the layer's. On any error the layer keeps its weights. Runs through
        sgk_layer_set_weights (host memory; synchronous)."""
        layer = self._handle()
        eps = self.eps if eps is None else eps
        desc, arrays, _ = self._desc(weights, eps)
        check(self._lib.sgk_layer_set_weights(layer, ctypes.byref(desc)))
        del arrays  # held until the call has copied them
        self.eps = eps

    def _handle(self):
        if self._layer is None:
            raise ValueError("the layer is closed")
        return self._layer

    def _inputs(self, nodes, pair_feats, edge_mask):
        """The checked, C-contiguous inputs, B, N and the mask type."""
        f32, mine = np.dtype(np.float32), DTYPES[self.dtype][1]
        nodes = _array("nodes", nodes, 3, [mine])
        pair_feats = _array("pair_feats", pair_feats, 4, [mine])
        edge_mask = _array("edge_mask", edge_mask, 3, [f32, np.dtype(np.uint8), np.dtype(np.bool_)])
        B, N, D = nodes.shape
        if D != self.dim:
            raise ValueError(f"nodes must be (B, N, D={self.dim}), got {nodes.shape}")
        P = self.pair_dim
        if pair_feats.shape != (B, N, N, P):
            raise ValueError(f"pair_feats must be (B, N, N, P) = {(B, N, N, P)} "
                             f"to match nodes {nodes.shape}, got {pair_feats.shape}")
        if edge_mask.shape != (B, N, N):
            raise ValueError(f"edge_mask must be (B, N, N) = {(B, N, N)} "
                             f"to match nodes {nodes.shape}, got {edge_mask.shape}")
        if edge_mask.dtype == np.bool_:
            edge_mask = edge_mask.view(np.uint8)
        mask_type = _lib.MASK_F32 if edge_mask.dtype == f32 else _lib.MASK_U8
        req = ["C_CONTIGUOUS", "ALIGNED"]
        return (np.require(nodes, requirements=req), np.require(pair_feats, requirements=req),
                np.require(edge_mask, requirements=req), B, N, mask_type)

    def forward(self, nodes, pair_feats, edge_mask):
        """out = layer(nodes, pair_feats, edge_mask), a new array (B, N, D) of
        the layer's dtype.

        nodes (B, N, D) and pair_feats (B, N, N, P) must be of the layer's
        dtype (float32, float16, or uint16 bfloat16 bits); edge_mask
        (B, N, N) float32 (nonzero is an edge), uint8 (nonzero is an edge) or
        bool (passed as uint8). Other dtypes are refused (TypeError), not
        converted; wrong dimensions or shapes are a ValueError. Inputs that
        are not C-contiguous are copied. Runs through sgk_forward (host
        memory; any backend) and blocks until the result is there.
        """
        layer = self._handle()
        nodes, pair_feats, edge_mask, B, N, mask_type = self._inputs(nodes, pair_feats, edge_mask)
        out = np.empty((B, N, self.dim), dtype=DTYPES[self.dtype][1])
        check(self._lib.sgk_forward(layer, B, N, nodes.ctypes.data, pair_feats.ctypes.data,
                                    edge_mask.ctypes.data, mask_type, out.ctypes.data))
        return out

    def backward(self, nodes, pair_feats, edge_mask, d_out):
        """The gradients of sum(d_out * layer(nodes, pair_feats, edge_mask)),
        as a dict of arrays in the layer's dtype (bfloat16 as uint16 bit
        patterns): "nodes", "pair_feats" and the weights' state-dict names
        (norm.weight, q_proj.weight, ...), each in its tensor's shape.

        Inputs as forward's; d_out (B, N, D) in the layer's dtype. Runs
        sgk_forward_train (for the softmax statistics the backward needs)
        and sgk_backward, on every backend.
        """
        layer = self._handle()
        nodes, pair_feats, edge_mask, B, N, mask_type = self._inputs(nodes, pair_feats, edge_mask)
        dt = DTYPES[self.dtype][1]
        d_out = _array("d_out", d_out, 3, [dt])
        if d_out.shape != nodes.shape:
            raise ValueError(f"d_out must have the shape of nodes {nodes.shape}, got {d_out.shape}")
        d_out = np.require(d_out, requirements=["C_CONTIGUOUS", "ALIGNED"])
        size = ctypes.c_size_t()
        check(self._lib.sgk_saved_size(layer, B, N, ctypes.byref(size)))
        saved = np.empty(size.value // 4, dtype=np.float32)
        out = np.empty(nodes.shape, dtype=dt)
        check(self._lib.sgk_forward_train(layer, B, N, nodes.ctypes.data, pair_feats.ctypes.data,
                                          edge_mask.ctypes.data, mask_type, out.ctypes.data,
                                          saved.ctypes.data))
        D, P, H = self.dim, self.pair_dim, self.heads
        dims = {"D": D, "P": P, "H": H}
        grads = {"nodes": np.empty(nodes.shape, dt),
                 "pair_feats": np.empty(pair_feats.shape, dt)}
        g = _lib.Grads()
        g.nodes, g.pair_feats = grads["nodes"].ctypes.data, grads["pair_feats"].ctypes.data
        for key, (field, shape) in WEIGHTS.items():
            a = grads[key] = np.empty(tuple(dims[d] for d in shape), dt)
            setattr(g, field, a.ctypes.data)
        check(self._lib.sgk_backward(layer, B, N, nodes.ctypes.data, pair_feats.ctypes.data,
                                     edge_mask.ctypes.data, mask_type, saved.ctypes.data,
                                     d_out.ctypes.data, ctypes.byref(g)))
        return grads

    __call__ = forward

    def variants(self, B, N):
        """The backend's variants, in the order the automatic choice prefers
        them, as Variant(name, supported) for shape (B, N)."""
        layer = self._handle()
        count = ctypes.c_int()
        check(self._lib.sgk_layer_variants(layer, B, N, None, None, 0, ctypes.byref(count)))
        names = (ctypes.c_char_p * max(count.value, 1))()
        supported = (ctypes.c_int * max(count.value, 1))()
        check(self._lib.sgk_layer_variants(layer, B, N, names, supported, count.value,
                                           ctypes.byref(count)))
        return [Variant(names[i].decode(), bool(supported[i])) for i in range(count.value)]

    def set_variant(self, name):
        """Force a variant by name for later forward calls; None restores the
        automatic choice. A forced variant that does not support a shape makes
        forward raise sgk.Error (SGK_ERR_UNSUPPORTED)."""
        layer = self._handle()
        check(self._lib.sgk_layer_set_variant(layer, None if name is None else str(name).encode()))

    def variant_for(self, B, N):
        """The name of the variant forward would run for (B, N)."""
        layer = self._handle()
        name = ctypes.c_char_p()
        check(self._lib.sgk_layer_variant_for(layer, B, N, ctypes.byref(name)))
        return name.value.decode()

    def close(self):
        """Free the layer, then its context; later calls are no-ops."""
        layer, ctx = getattr(self, "_layer", None), getattr(self, "_ctx", None)
        self._layer = self._ctx = None
        if layer is not None:
            self._lib.sgk_layer_destroy(layer)
        if ctx is not None:
            self._lib.sgk_context_destroy(ctx)

    @property
    def closed(self):
        return self._layer is None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def __repr__(self):
        state = "closed" if self.closed else f"{self.backend}:{self.device}"
        return (f"sgk.Layer(dim={self.dim}, pair_dim={self.pair_dim}, heads={self.heads}, "
                f"dtype={self.dtype}, {state})")
