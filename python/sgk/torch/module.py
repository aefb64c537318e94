"""sgk.torch.RelationUpdate and the operator torch.ops.sgk.relation_update.

The operator takes the layer's inputs and its ten weights as tensors, so it
is a pure function to PyTorch (torch.compile, opcheck and autograd see no
hidden state). Behind it sit sgk layers, one per module and device, holding
the weights packed the way the backend runs them. Before each forward the
operator compares every weight's identity, data_ptr and version with what
was packed last and, when one changed (an optimizer step, load_state_dict,
any in-place write), repacks from the tensors themselves with
sgk_layer_set_weights_device on the current stream: no host copy, no
allocation, nothing the caller must call.

Under CUDA-graph capture nothing Python-side runs at replay, so a capture
also records the repack (one gather kernel per replay) and replays follow
in-place weight updates; RelationUpdate(..., repack_in_graphs=False) leaves
it out for weights that stay fixed after capture.
"""
import ctypes
import functools
import importlib.util
import itertools
import operator
import os
import threading
import typing
import weakref

import torch
from torch._subclasses.fake_tensor import is_fake as _is_fake

from .. import _lib
from ..layer import DTYPES, WEIGHTS, Layer
from . import reference

# State-dict names and sgk_layer_desc fields, in the order the operator takes
# the weights.
KEYS = tuple(WEIGHTS)
FIELDS = tuple(WEIGHTS[k][0] for k in KEYS)

_MASKS = {torch.float32: _lib.MASK_F32, torch.uint8: _lib.MASK_U8, torch.bool: _lib.MASK_U8}
# torch dtypes of the weights and data -> sgk.Layer's dtype names
_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _shapes(weights):
    """(D, P, H) from the weights, checking the ten shapes against each other."""
    if len(weights) != len(KEYS):
        raise ValueError(f"sgk.torch: weights must be the {len(KEYS)} tensors "
                         f"{', '.join(KEYS)}; got {len(weights)}")
    g, w1, w2 = weights[0], weights[6], weights[8]
    if g.dim() != 1 or w1.dim() != 2 or w2.dim() != 2:
        raise ValueError("sgk.torch: norm.weight must be (D), rel_mlp.0.weight (P, P) and "
                         f"rel_mlp.2.weight (H, P); got {tuple(g.shape)}, {tuple(w1.shape)}, "
                         f"{tuple(w2.shape)}")
    sizes = {"D": g.shape[0], "P": w1.shape[1], "H": w2.shape[0]}
    for key, w in zip(KEYS, weights):
        want = tuple(sizes[d] for d in WEIGHTS[key][1])
        if tuple(w.shape) != want:
            named = ", ".join(f"{d}={sizes[d]}" for d in WEIGHTS[key][1])
            raise ValueError(f"sgk.torch: {key} must have shape ({named}) = {want}, "
                             f"got {tuple(w.shape)}")
    return sizes["D"], sizes["P"], sizes["H"]


def _check_weights(weights):
    """(D, P, H) of the weights after checking their shapes, dtypes and
    devices against each other."""
    D, P, H = _shapes(weights)
    dev, dtype = weights[0].device, weights[0].dtype
    if dtype not in _DTYPES:
        raise TypeError(f"sgk.torch: {KEYS[0]} has dtype {dtype}: sgk runs torch.float32, "
                        "torch.bfloat16 and torch.float16")
    for key, w in zip(KEYS, weights):
        if w.dtype != dtype:
            raise TypeError(f"sgk.torch: {key} has dtype {w.dtype} but {KEYS[0]} {dtype}: "
                            "every weight must have one dtype")
        if w.device != dev:
            raise ValueError(f"sgk.torch: {key} is on {w.device} but {KEYS[0]} on {dev}: "
                             "every tensor must be on one device")
    return D, P, H


def _check_inputs(nodes, pair_feats, edge_mask, D, P, H, wdevice, wdtype):
    """(B, N) after checking the inputs against the weights' sizes, device
    and dtype."""
    if nodes.dim() != 3 or nodes.shape[2] != D:
        raise ValueError(f"sgk.torch: nodes must be (B, N, D={D}), got {tuple(nodes.shape)}")
    B, N = nodes.shape[0], nodes.shape[1]
    if pair_feats.shape != (B, N, N, P):
        raise ValueError(f"sgk.torch: pair_feats must be (B, N, N, P) = {(B, N, N, P)} to match "
                         f"nodes {tuple(nodes.shape)}, got {tuple(pair_feats.shape)}")
    if edge_mask.shape != (B, N, N):
        raise ValueError(f"sgk.torch: edge_mask must be (B, N, N) = {(B, N, N)} to match "
                         f"nodes {tuple(nodes.shape)}, got {tuple(edge_mask.shape)}")
    if nodes.dtype != wdtype or pair_feats.dtype != wdtype:
        name, t = ("nodes", nodes) if nodes.dtype != wdtype else ("pair_feats", pair_feats)
        raise TypeError(f"sgk.torch: {name} has dtype {t.dtype} but the weights {wdtype}: nodes, "
                        "pair_feats and the weights must have one dtype (torch.float32, "
                        "torch.bfloat16 or torch.float16)")
    if edge_mask.dtype not in _MASKS:
        raise TypeError(f"sgk.torch: edge_mask has dtype {edge_mask.dtype}: must be "
                        "torch.float32, torch.uint8 or torch.bool (nonzero is an edge)")
    dev = nodes.device
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"sgk.torch: nodes is on {dev}: sgk runs CPU tensors (cpu "
                         "backend) and CUDA tensors (cuda backend)")
    if pair_feats.device != dev or edge_mask.device != dev or wdevice != dev:
        name, where = _odd_device(pair_feats, edge_mask, wdevice, dev)
        raise ValueError(f"sgk.torch: {name} is on {where} but nodes on {dev}: "
                         "every tensor must be on one device")
    return B, N


def _odd_device(pair_feats, edge_mask, wdevice, dev):
    for name, where in (("pair_feats", pair_feats.device), ("edge_mask", edge_mask.device),
                        ("norm.weight", wdevice)):
        if where != dev:
            return name, where


def _check(nodes, pair_feats, edge_mask, weights):
    """Everything the operator refuses, said before anything runs."""
    D, P, H = _check_weights(weights)
    return _check_inputs(nodes, pair_feats, edge_mask, D, P, H, weights[0].device, weights[0].dtype)


def _load_fast():
    """sgk._fast (the inference call in C), or None where it was not built:
    from $SGK_EXTENSION when that is set (the tests, run from the source
    tree; a path that does not load is an error then), else from the
    package."""
    path = os.environ.get("SGK_EXTENSION")
    if path:
        spec = importlib.util.spec_from_file_location("sgk._fast", path)
        if spec is None:
            raise ImportError(f"sgk.torch: SGK_EXTENSION={path} is not a Python extension module")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    try:
        from .. import _fast
    except ImportError:
        return None
    return _fast


_FAST = _load_fast()


class _Bound:
    """One sgk layer on one device, and what its weights were packed from."""

    def __init__(self, layer):
        self.layer = layer
        self.handle = layer._handle()  # read on every call
        self.packed_from = None  # _versions() of the weights last packed
        self.workspace = {}      # (B, N) -> bytes


class _State:
    """A module's sgk layers (one per device) and its settings. Operator
    calls find it by its id in _STATES; it lives as long as its module."""

    _ids = itertools.count()

    def __init__(self, repack_in_graphs=True, always_repack=False, cpu_threads=0):
        self.id = next(self._ids)
        self.cpu_threads = cpu_threads
        self.repack_in_graphs = repack_in_graphs
        self.always_repack = always_repack
        self.variant = None
        self.bound = {}  # device -> _Bound
        self.lock = threading.Lock()
        self.plan = None  # sgk._fast.Plan of the last inference call
        _STATES[self.id] = self

    def set_variant(self, name):
        with self.lock:
            self.plan = None
            for b in self.bound.values():
                b.layer.set_variant(name)
                b.workspace.clear()  # sizes are the variant's
            self.variant = name


_STATES = weakref.WeakValueDictionary()
# The layers of operator calls made without a module (layer_id -1): one per
# device, stream and shape, repacked on every call.
_SHARED = {}
_SHARED_LOCK = threading.Lock()


def _state_for(layer_id, nodes, weights, eps):
    if layer_id >= 0:
        state = _STATES.get(layer_id)
        if state is None:
            raise ValueError(f"sgk.torch: layer_id {layer_id} names no live RelationUpdate; "
                             "pass -1 to run without a module")
        return state
    stream = _stream(nodes.device) if nodes.is_cuda else 0
    key = (str(nodes.device), stream, tuple(weights[0].shape), tuple(weights[8].shape), eps)
    with _SHARED_LOCK:
        state = _SHARED.get(key)
        if state is None:
            state = _SHARED[key] = _State(always_repack=True)
    return state


# PyTorch's own fast forms where it has them (inductor's generated code
# calls the first); the public ones cost microseconds more per call.
_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) or torch.cuda.is_current_stream_capturing


def _stream(device):
    """The raw current CUDA stream of device, as an int."""
    if _RAW_STREAM is not None:
        return _RAW_STREAM(device.index if device.index is not None else torch.cuda.current_device())
    return torch.cuda.current_stream(device).cuda_stream


_VERSION = operator.attrgetter("_version")
_DATA_PTR = torch.Tensor.data_ptr


def _versions(weights):
    """(identities, data_ptrs, versions) of the weights: what was packed is
    still what they hold while all three are unchanged (an in-place write
    bumps the version; `.data =` keeps it but moves the data). An inference
    tensor, which keeps no version, counts as changed on every call."""
    try:
        return tuple(map(id, weights)), tuple(map(_DATA_PTR, weights)), tuple(map(_VERSION, weights))
    except RuntimeError:
        return None


def _bind(state, nodes, weights, eps):
    """A new sgk layer for nodes' device, packed from the weights, in place
    of the one there (if any)."""
    dev = nodes.device
    if dev.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(f"sgk.torch: the sgk layer for {dev} is made on the module's first "
                           "call there, which copies weights and cannot happen during CUDA-graph "
                           "capture: run the module once on that device before capturing")
    # as float32 (exact from bfloat16 and float16; the layer rounds back)
    host = {k: w.detach().to("cpu", torch.float32).contiguous().numpy() for k, w in zip(KEYS, weights)}
    backend = "cuda" if dev.type == "cuda" else "cpu"
    index = (dev.index if dev.index is not None else torch.cuda.current_device()) if dev.type == "cuda" else 0
    layer = Layer(backend, host, device=index, eps=eps, cpu_threads=state.cpu_threads,
                  dtype=_DTYPES[weights[0].dtype])
    if state.variant is not None:
        layer.set_variant(state.variant)
    old = state.bound.get(dev)
    b = state.bound[dev] = _Bound(layer)
    if old is not None:
        old.layer.close()
    return b


def _repack(lib, b, weights, stream):
    L = b.layer
    desc = _lib.layer_desc(L.dim, L.pair_dim, L.heads, L.eps,
                           {field: w.data_ptr() for field, w in zip(FIELDS, weights)}, DTYPES[L.dtype][0])
    _lib.check(lib.sgk_layer_set_weights_device(b.handle, ctypes.byref(desc), stream))


def _bound_for(state, lib, nodes, pair_feats, edge_mask, weights, eps):
    """The layer for nodes' device, packed from these weights (checked, and
    bound or repacked where they changed), with (B, N) and the stream; the
    caller holds state.lock."""
    dev = nodes.device
    cuda = dev.type == "cuda"
    now = _versions(weights)
    b = state.bound.get(dev)
    if b is not None and b.layer.closed:  # closed by its user (sgk_layer(device).close())
        b = None
    if (b is not None and b.layer.eps == eps and now is not None and now == b.packed_from
            and not state.always_repack):
        # The same weight tensors, unchanged since they were checked and packed.
        L = b.layer
        B, N = _check_inputs(nodes, pair_feats, edge_mask, L.dim, L.pair_dim, L.heads, dev,
                             weights[0].dtype)
        repack = False
    else:
        D, P, H = _check_weights(weights)
        B, N = _check_inputs(nodes, pair_feats, edge_mask, D, P, H, weights[0].device, weights[0].dtype)
        weights = [w.contiguous() for w in weights]
        # new weights of the layer's dtype are repacked; another dtype
        # (module.to(torch.bfloat16)) makes a new layer
        repack = b is not None and b.layer.eps == eps and b.layer.dtype == _DTYPES[weights[0].dtype]
        if not repack:
            b = _bind(state, nodes, weights, eps)  # packed from these weights
    stream = _stream(dev) if cuda else 0
    if repack or (cuda and state.repack_in_graphs and _capturing()):
        _repack(lib, b, weights, stream)
    b.packed_from = now
    return b, B, N, stream


def _workspace(lib, b, B, N, train):
    """Workspace bytes of a forward (or forward_train) call, asked once a shape."""
    key = (train, B, N)
    ws = b.workspace.get(key)
    if ws is None:
        size = ctypes.c_size_t()
        query = lib.sgk_train_workspace_size if train else lib.sgk_workspace_size
        _lib.check(query(b.handle, B, N, ctypes.byref(size)))
        ws = b.workspace[key] = size.value
    return ws


def _call(nodes, pair_feats, edge_mask, weights, eps, layer_id, train):
    """The operators' real implementation (CPU and CUDA tensors): out, or
    with train (sgk_forward_train_device) (out, saved), saved the softmax
    statistics sgk's backward reads."""
    state = _state_for(layer_id, nodes, weights, eps)
    lib = _lib.lib()
    with state.lock:
        b, B, N, stream = _bound_for(state, lib, nodes, pair_feats, edge_mask, weights, eps)
        nodes, pair_feats, edge_mask = nodes.contiguous(), pair_feats.contiguous(), edge_mask.contiguous()
        ws = _workspace(lib, b, B, N, train)
        out = torch.empty_like(nodes)
        args = (b.handle, B, N, nodes.data_ptr(), pair_feats.data_ptr(), edge_mask.data_ptr(),
                _MASKS[edge_mask.dtype], out.data_ptr())
        if not train:
            work = torch.empty(ws, dtype=torch.uint8, device=nodes.device) if ws else None
            status = lib.sgk_forward_device(*args, work.data_ptr() if ws else None, ws, stream or None)
            if status:
                _lib.check(status)
            if _FAST is not None and not state.always_repack:
                state.plan = _plan(state, lib, b, weights, eps, nodes, edge_mask, B, N, ws, work)
            return out
        saved = torch.empty(B, b.layer.heads, N, dtype=torch.float32, device=nodes.device)
        work = torch.empty(max(ws, 1), dtype=torch.uint8, device=nodes.device)
        _lib.check(lib.sgk_forward_train_device(*args, saved.data_ptr(), work.data_ptr(), ws, stream or None))
    return out, saved


def _plan(state, lib, b, weights, eps, nodes, edge_mask, B, N, ws, work):
    """What this call checked and packed, for sgk._fast.forward to check
    again at the module's next call (None where it cannot). work: the
    workspace this call used."""
    dev = nodes.device
    cuda = dev.type == "cuda"
    if b.packed_from is None or (cuda and _RAW_STREAM is None):
        return None
    _, ptrs, versions = b.packed_from
    # A cpu call ends before the lock is let go, so this call's workspace
    # serves every later one; a cuda call only enqueues, so each makes its own.
    if ws and cuda:
        work = functools.partial(torch.empty, ws, dtype=torch.uint8, device=dev)
    return _FAST.Plan(ctypes.cast(lib.sgk_forward_device, ctypes.c_void_p).value, b.layer,
                      b.handle.value, list(weights), ptrs, versions, float(eps),
                      dev.index if cuda else -1, nodes.dtype, b.layer.dim, b.layer.pair_dim,
                      b.layer.heads, B, N, edge_mask.dtype, _MASKS[edge_mask.dtype], ws, work,
                      _RAW_STREAM if cuda else None,
                      _capturing if cuda and state.repack_in_graphs else None, state.lock,
                      torch.empty_like)


def _run(nodes, pair_feats, edge_mask, weights, eps, layer_id):
    return _call(nodes, pair_feats, edge_mask, weights, eps, layer_id, False)


def _run_train(nodes, pair_feats, edge_mask, weights, eps, layer_id):
    return _call(nodes, pair_feats, edge_mask, weights, eps, layer_id, True)


@torch.library.custom_op("sgk::relation_update", mutates_args=())
def relation_update(nodes: torch.Tensor, pair_feats: torch.Tensor, edge_mask: torch.Tensor,
                    weights: typing.List[torch.Tensor], eps: float = 1e-5,
                    layer_id: int = -1) -> torch.Tensor:
    """out = nodes + attention(LayerNorm(nodes), pair bias, edge_mask) Wo^T
    (SPEC section 1), computed by sgk.

    weights: the ten tensors in state-dict order (norm.weight, norm.bias,
    q_proj.weight, k_proj.weight, v_proj.weight, out_proj.weight,
    rel_mlp.0.weight, rel_mlp.0.bias, rel_mlp.2.weight, rel_mlp.2.bias).
    layer_id: a RelationUpdate's, whose sgk layer is reused and repacked
    only when a weight changed; -1 (a call without a module) repacks on
    every call. nodes, pair_feats and the weights must share one dtype,
    torch.float32, torch.bfloat16 or torch.float16 (the mask float32,
    uint8 or bool), on one CPU or CUDA device (16-bit: where the backend
    runs it, else sgk.Error); non-contiguous ones are copied to contiguous
    first. CUDA work goes on the current stream.
    """
    return _run(nodes, pair_feats, edge_mask, weights, eps, layer_id)


@relation_update.register_fake
def _(nodes, pair_feats, edge_mask, weights, eps=1e-5, layer_id=-1):
    _check(nodes, pair_feats, edge_mask, weights)
    return torch.empty_like(nodes, memory_format=torch.contiguous_format)


@torch.library.custom_op("sgk::relation_update_train", mutates_args=())
def relation_update_train(nodes: torch.Tensor, pair_feats: torch.Tensor, edge_mask: torch.Tensor,
                          weights: typing.List[torch.Tensor], eps: float = 1e-5,
                          layer_id: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """relation_update's forward for training: (out, saved), saved the
    softmax statistics sgk's backward reads (float32, (B, H, N)), so that
    the backward need not run the forward again. RelationUpdate calls it
    when autograd records; its gradient is relation_update's."""
    return _run_train(nodes, pair_feats, edge_mask, weights, eps, layer_id)


@relation_update_train.register_fake
def _(nodes, pair_feats, edge_mask, weights, eps=1e-5, layer_id=-1):
    B, N = _check(nodes, pair_feats, edge_mask, weights)
    return (torch.empty_like(nodes, memory_format=torch.contiguous_format),
            nodes.new_empty((B, weights[8].shape[0], N), dtype=torch.float32))


_REFERENCE = {}


def _reference_forward(nodes, pair_feats, edge_mask, weights, eps):
    """sgk.torch.reference's forward with these tensors as its parameters."""
    # int(): under dynamic shapes these are symbols; the module needs sizes.
    D, P, H = int(weights[0].shape[0]), int(weights[6].shape[1]), int(weights[8].shape[0])
    m = _REFERENCE.get((D, P, H))
    if m is None:
        with torch.device("meta"):
            m = _REFERENCE[(D, P, H)] = reference.RelationUpdate(D, P, H)
    m.norm.eps = eps
    return torch.func.functional_call(m, dict(zip(KEYS, weights)), (nodes, pair_feats, edge_mask))


def _setup_context(ctx, inputs, output):
    nodes, pair_feats, edge_mask, weights, eps, layer_id = inputs
    ctx.save_for_backward(nodes, pair_feats, edge_mask, *weights)
    ctx.eps = eps
    ctx.layer_id = layer_id


def _real(tensors):
    """Whether these are plain CPU or CUDA tensors of one device that sgk can
    read: not fake, meta or another tensor subclass (torch.compile and
    opcheck trace the backward with fake and functional tensors)."""
    dev = tensors[0].device
    return dev.type in ("cpu", "cuda") and all(
        type(t) in (torch.Tensor, torch.nn.Parameter) and t.device == dev and not _is_fake(t) for t in tensors)


def _sgk_backward(nodes, pair_feats, edge_mask, weights, eps, layer_id, grad, saved=None):
    """sgk's backward on these tensors' own memory (CPU, or CUDA on the
    current stream), into new tensors of their dtype: sgk_forward_train_device
    for the softmax statistics (unless the forward saved them), then
    sgk_backward_device. On the module's own
    layer for the device where that was packed from these very weights (held
    under the module's lock, so no forward repacks it meanwhile), else on a
    layer made from them."""
    dev, dt = nodes.device, nodes.dtype
    mask = edge_mask.detach().contiguous()
    if mask.dtype == torch.bool:
        mask = mask.view(torch.uint8)
    nodes, pair_feats = nodes.detach().contiguous(), pair_feats.detach().contiguous()
    grad = grad.detach().to(dt).contiguous()
    state = _STATES.get(layer_id) if layer_id >= 0 else None
    if state is not None:
        with state.lock:
            b, now = state.bound.get(dev), _versions(weights)
            if (b is not None and not b.layer.closed and now is not None and b.packed_from == now
                    and b.layer.eps == eps):
                return _run_backward(b.layer, nodes, pair_feats, mask, grad, saved)
    # as float32 (exact from bfloat16 and float16; the layer rounds back)
    host = {k: w.detach().to("cpu", torch.float32).contiguous().numpy() for k, w in zip(KEYS, weights)}
    backend = "cuda" if dev.type == "cuda" else "cpu"
    index = (dev.index if dev.index is not None else torch.cuda.current_device()) if dev.type == "cuda" else 0
    with Layer(backend, host, device=index, eps=eps, dtype=_DTYPES[dt]) as layer:
        return _run_backward(layer, nodes, pair_feats, mask, grad, saved)


def _run_backward(layer, nodes, pair_feats, mask, grad, saved=None):
    lib, h = _lib.lib(), layer._handle()
    dev = nodes.device
    B, N = nodes.shape[0], nodes.shape[1]
    stream = (_stream(dev) if dev.type == "cuda" else 0) or None
    size, ws = ctypes.c_size_t(), ctypes.c_size_t()
    _lib.check(lib.sgk_saved_size(h, B, N, ctypes.byref(size)))
    _lib.check(lib.sgk_train_workspace_size(h, B, N, ctypes.byref(ws)))
    work = torch.empty(max(ws.value, 1), dtype=torch.uint8, device=dev)
    dn, dp = torch.empty_like(nodes), torch.empty_like(pair_feats)
    D, P, H = layer.dim, layer.pair_dim, layer.heads
    dims = {"D": D, "P": P, "H": H}
    dw = [torch.empty(tuple(dims[d] for d in WEIGHTS[k][1]), dtype=nodes.dtype, device=dev) for k in KEYS]
    g = _lib.Grads()
    g.nodes, g.pair_feats = dn.data_ptr(), dp.data_ptr()
    for k, t in zip(KEYS, dw):
        setattr(g, WEIGHTS[k][0], t.data_ptr())
    mask_type = _MASKS[mask.dtype]
    if saved is None:
        saved, out = torch.empty(size.value // 4, dtype=torch.float32, device=dev), torch.empty_like(nodes)
        _lib.check(lib.sgk_forward_train_device(h, B, N, nodes.data_ptr(), pair_feats.data_ptr(),
                                                mask.data_ptr(), mask_type, out.data_ptr(), saved.data_ptr(),
                                                work.data_ptr(), ws.value, stream))
    elif saved.numel() * 4 != size.value:
        raise ValueError(f"sgk.torch: saved has {saved.numel()} floats, the layer's backward reads "
                         f"{size.value // 4} (B*H*N)")
    else:
        saved = saved.detach().contiguous()
    _lib.check(lib.sgk_backward_device(h, B, N, nodes.data_ptr(), pair_feats.data_ptr(), mask.data_ptr(),
                                       mask_type, saved.data_ptr(), grad.data_ptr(), ctypes.byref(g),
                                       work.data_ptr(), ws.value, stream))
    return dn, dp, dw


def _gradients(nodes, pair_feats, edge_mask, weights, eps, layer_id, grad, saved):
    """The operators' gradients (saved: the forward's softmax statistics, or
    None)."""
    # sgk's own backward, on CPU and CUDA tensors alike; it gives no graph,
    # so a double backward (grad mode on here) takes the path below, as do
    # traced (fake or meta) tensors.
    kept = [] if saved is None else [saved]
    if not torch.is_grad_enabled() and _real([nodes, pair_feats, edge_mask, grad, *weights, *kept]):
        dn, dp, dw = _sgk_backward(nodes, pair_feats, edge_mask, weights, eps, layer_id, grad, saved)
        return dn, dp, None, dw, None, None
    # Otherwise: recompute the forward with PyTorch ops and differentiate that.
    with torch.enable_grad():
        xs = [t.detach().requires_grad_(True) for t in [nodes, pair_feats] + weights]
        out = _reference_forward(xs[0], xs[1], edge_mask, xs[2:], eps)
        grads = torch.autograd.grad(out, xs, grad)
    return grads[0], grads[1], None, list(grads[2:]), None, None


def _backward(ctx, grad):
    nodes, pair_feats, edge_mask, *weights = ctx.saved_tensors
    return _gradients(nodes, pair_feats, edge_mask, weights, ctx.eps, ctx.layer_id, grad, None)


relation_update.register_autograd(_backward, setup_context=_setup_context)


def _setup_context_train(ctx, inputs, output):
    nodes, pair_feats, edge_mask, weights, eps, layer_id = inputs
    ctx.save_for_backward(nodes, pair_feats, edge_mask, output[1], *weights)
    ctx.eps = eps
    ctx.layer_id = layer_id


def _backward_train(ctx, grad, _grad_saved):
    nodes, pair_feats, edge_mask, saved, *weights = ctx.saved_tensors
    return _gradients(nodes, pair_feats, edge_mask, weights, ctx.eps, ctx.layer_id, grad, saved)


relation_update_train.register_autograd(_backward_train, setup_context=_setup_context_train)


class RelationUpdate(reference.RelationUpdate):
    """RelationUpdate(dim, pair_dim, num_heads, *, repack_in_graphs=True, cpu_threads=0)

    sgk.torch.reference.RelationUpdate, with its parameters (same names,
    shapes and initialisation, so load_state_dict of a trained reference
    model works unchanged), whose forward runs sgk: the cpu backend on CPU
    tensors, the cuda backend on CUDA tensors of their own device, zero-copy
    on PyTorch's current stream.

    forward(nodes (B,N,D), pair_feats (B,N,N,P), edge_mask (B,N,N)) ->
    (B,N,D). torch.float32, or torch.bfloat16 / torch.float16 after
    module.to(dtype) (the cpu backend; fp32 arithmetic inside, out rounded
    to the dtype); edge_mask float32, uint8 or bool.
    Wrong dtypes, shapes or devices raise TypeError or ValueError before
    anything runs; sgk's own errors raise sgk.Error. Non-contiguous inputs
    are copied to contiguous ones.

    The sgk layer for a device is made on the first call there (so, with
    CUDA graphs, run the module once before capturing). Weight changes are
    picked up by the next call: no rebuild, no host copy (writes through
    `param.data`, which PyTorch does not count, after weights_changed()).
    Inference calls whose weights, eps, shapes, dtypes and devices are the
    last call's run in C (sgk._fast, where built). Under CUDA-graph
    capture the repack is captured too, so that replays follow in-place
    updates of the weights; repack_in_graphs=False leaves it out of
    captures (weights fixed once captured).

    cpu_threads: the cpu backend's OpenMP threads (0: OpenMP's default).
    For inference, call under torch.no_grad() or torch.inference_mode():
    the call then skips autograd's bookkeeping, which costs more than the
    layer itself at small shapes.

    Backward is sgk's: while autograd records, the forward is
    sgk_forward_train_device (torch.ops.sgk.relation_update_train), which
    also keeps the softmax statistics (B*H*N floats), and the backward is
    sgk_backward_device on the saved inputs, in their dtype, on the current
    stream. For a double backward it is the slow path: it recomputes the
    layer with PyTorch ops (sgk.torch.reference) and differentiates that, so
    gradients are right but cost what PyTorch's own module costs, plus the
    saved inputs.
    """

    def __init__(self, dim, pair_dim, num_heads, *, repack_in_graphs=True, cpu_threads=0):
        super().__init__(dim, pair_dim, num_heads)
        self._sgk = _State(repack_in_graphs=repack_in_graphs, cpu_threads=cpu_threads)

    def _weights(self):
        # Through the module dicts, not attribute access: this runs every call.
        m = self._modules
        norm, mlp = m["norm"]._parameters, m["rel_mlp"]._modules
        w1, w2 = mlp["0"]._parameters, mlp["2"]._parameters
        return [norm["weight"], norm["bias"], m["q_proj"]._parameters["weight"],
                m["k_proj"]._parameters["weight"], m["v_proj"]._parameters["weight"],
                m["out_proj"]._parameters["weight"], w1["weight"], w1["bias"], w2["weight"],
                w2["bias"]]

    def forward(self, nodes, pair_feats, edge_mask):
        if not torch.compiler.is_compiling() and not torch.is_grad_enabled():
            # Inference with nothing changed since the last call: the same
            # call in C (sgk/_fast.c), or None where something did.
            plan = self._sgk.plan
            if plan is not None:
                out = _FAST.forward(plan, self, nodes, pair_feats, edge_mask)
                if out is not None:
                    if type(out) is int:
                        _lib.check(out)
                    return out
        weights = self._weights()
        if torch.is_grad_enabled() and (nodes.requires_grad or pair_feats.requires_grad or
                                        any(w.requires_grad for w in weights)):
            # keeps the softmax statistics for the backward
            return relation_update_train(nodes, pair_feats, edge_mask, weights, self.norm.eps, self._sgk.id)[0]
        if torch.compiler.is_compiling():
            return relation_update(nodes, pair_feats, edge_mask, weights, self.norm.eps, self._sgk.id)
        # Nothing to record for autograd or a compiler: the operator's own
        # implementation, without the dispatcher's cost per call.
        return _run(nodes, pair_feats, edge_mask, weights, self.norm.eps, self._sgk.id)

    def set_variant(self, name):
        """Force an sgk kernel variant by name (sgk.Layer.set_variant) on every
        device, now and for layers made later; None restores the automatic
        choice."""
        self._sgk.set_variant(name)

    def weights_changed(self):
        """Repack the weights at the next call. Every write PyTorch counts
        (in-place ops, optimizer steps, load_state_dict, `.data =`) is seen
        without this; writes it does not count, through `param.data` (for
        example `param.data.mul_(0.5)`) or through a data_ptr by other
        libraries, are seen only after it."""
        with self._sgk.lock:
            self._sgk.plan = None
            for b in self._sgk.bound.values():
                b.packed_from = None

    def sgk_layer(self, device):
        """The sgk.Layer this module runs on device (None before its first
        call there): for variants() and variant_for()."""
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        b = self._sgk.bound.get(device)
        return None if b is None else b.layer
