"""sgk.torch.RelationUpdate against sgk.torch.reference in float64: values,
state dicts, weight updates, autograd, the custom operator's contract
(opcheck, torch.compile), CUDA graphs and streams, bad input, and OpenMP
beside PyTorch's own threads. Skips without torch; the CUDA cases skip
without a CUDA device."""
import threading

import pytest

torch = pytest.importorskip("torch")
import sgk  # noqa: E402
import sgk.torch as st  # noqa: E402
from sgk.torch import reference  # noqa: E402

REL_L2, MAX_ABS = 1e-5, 1e-4  # SPEC section 6, fp32

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and any(
    b.name == "cuda" and b.available for b in sgk.backends()) else [])
cuda_only = pytest.mark.skipif("cuda" not in DEVICES, reason="no CUDA device with sgk's cuda backend")

# (B, N, D, H, P): the presets' widths, odd and tiny sizes, head dims 1 to 64
SHAPES = [(4, 24, 96, 4, 16), (2, 64, 256, 8, 32), (1, 1, 8, 2, 3), (3, 7, 12, 3, 5),
          (2, 33, 64, 1, 8), (1, 40, 256, 4, 8), (2, 17, 48, 48, 4)]


def inputs(B, N, D, P, device, seed, mask_dtype=torch.float32, empty_row=True):
    g = torch.Generator().manual_seed(seed)
    nodes = torch.randn(B, N, D, generator=g) * 2 + 0.5
    pair = torch.randn(B, N, N, P, generator=g)
    mask = torch.rand(B, N, N, generator=g) < 0.6
    mask[:, torch.arange(N), torch.arange(N)] = True
    if empty_row and N > 1:
        mask[0, N // 2, :] = False  # a row with no edge: out == nodes there
    return nodes.to(device), pair.to(device), mask.to(mask_dtype).to(device)


def randomise(module, seed):
    """Weights of both signs, not the initialiser's, at the scale a trained
    layer has (matrices ~ 1/sqrt(fan-in), so outputs stay O(1) and max abs
    error means what SPEC section 6 means by it)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            r = torch.randn(p.shape, generator=g)
            p.copy_(r / p.shape[1] ** 0.5 if p.dim() == 2 else
                    1 + 0.2 * r if name == "norm.weight" else 0.5 * r)
    return module


def reference_of(module):
    ref = reference.RelationUpdate(module.dim, module.pair_dim, module.num_heads).double()
    ref.load_state_dict(module.state_dict())
    ref.norm.eps = module.norm.eps
    return ref.to(next(module.parameters()).device)


def close(out, want, mask=None, nodes=None):
    err = (out.double() - want).norm() / want.norm()
    mx = (out.double() - want).abs().max()
    assert err <= REL_L2 and mx <= MAX_ABS, f"rel L2 {err:.3e}, max abs {mx:.3e}"
    if mask is not None:  # rows with no edge return their input bit for bit
        empty = ~(mask != 0).any(-1)
        assert torch.equal(out[empty], nodes[empty])


def test_state_dict_is_the_reference_modules():
    ref = reference.RelationUpdate(96, 16, 4)
    m = st.RelationUpdate(96, 16, 4)
    assert list(m.state_dict()) == list(ref.state_dict())
    m.load_state_dict(ref.state_dict())  # strict: same names and shapes
    ref.load_state_dict(m.state_dict())
    torch.manual_seed(3)
    a = reference.RelationUpdate(96, 16, 4)
    torch.manual_seed(3)
    b = st.RelationUpdate(96, 16, 4)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb), "the same seed gives the same initial weights"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}N{}D{}H{}P{}".format(*s))
@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.uint8, torch.bool], ids=str)
def test_matches_reference_fp64(device, shape, mask_dtype):
    B, N, D, H, P = shape
    seed = hash((shape, str(mask_dtype))) % 10000
    m = randomise(st.RelationUpdate(D, P, H), seed).to(device)
    x = inputs(B, N, D, P, device, seed, mask_dtype)
    with torch.no_grad():
        out = m(*x)
        want = reference_of(m)(x[0].double(), x[1].double(), x[2])
    assert out.dtype == torch.float32 and out.shape == x[0].shape and out.device == x[0].device
    close(out, want, x[2], x[0])


@pytest.mark.parametrize("device", DEVICES)
def test_weight_updates_are_picked_up(device):
    D, P, H = 64, 8, 4
    m = randomise(st.RelationUpdate(D, P, H), 1).to(device)
    x = inputs(2, 20, D, P, device, 2)
    check = lambda: close(m(*x), reference_of(m)(x[0].double(), x[1].double(), x[2]))
    with torch.no_grad():
        check()
        m.q_proj.weight.mul_(1.5)                         # in place
        check()
        m.load_state_dict(randomise(st.RelationUpdate(D, P, H), 3).state_dict())
        check()
        m.rel_mlp[2].bias = torch.nn.Parameter(torch.randn(H, device=device))  # a new tensor
        check()
        m.norm.weight.data = torch.randn(D, device=device)  # new storage, same Parameter
        check()
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    m(*x).sum().backward()
    opt.step()                                            # a training step
    with torch.no_grad():
        check()


fast_path = pytest.mark.skipif(st.module._FAST is None, reason="sgk._fast was not built "
                               "(Python's headers missing) and SGK_EXTENSION is not set")


@fast_path
@pytest.mark.parametrize("device", DEVICES)
def test_inference_fast_path(device, monkeypatch):
    """A call with nothing changed runs in C; each change takes the Python
    path once (checked, repacked where needed, right), then C again."""
    D, P, H = 32, 4, 2
    python_calls = []
    run = st.module._run
    monkeypatch.setattr(st.module, "_run", lambda *a: python_calls.append(1) or run(*a))
    m = randomise(st.RelationUpdate(D, P, H), 30).to(device)
    x = inputs(2, 9, D, P, device, 31)

    def step(change, x, python):
        before = len(python_calls)
        change()
        out = m(*x)
        close(out, reference_of(m)(x[0].double(), x[1].double(), x[2]), x[2], x[0])
        assert len(python_calls) - before == python, change.__doc__
        again = m(*x)
        assert len(python_calls) - before == python, f"{change.__doc__}: the next call is in C"
        assert torch.equal(again, out), change.__doc__
        return out

    def nothing():
        """nothing changed"""

    def in_place():
        """an in-place write"""
        m.q_proj.weight.mul_(1.5)

    def replaced():
        """a parameter replaced"""
        m.rel_mlp[2].bias = torch.nn.Parameter(torch.randn(H, device=device))

    def data_set():
        """.data = new storage"""
        m.norm.weight.data = torch.randn(D, device=device)

    def uncounted():
        """a write through .data, then weights_changed()"""
        m.v_proj.weight.data.mul_(-1)
        m.weights_changed()

    def eps():
        """another eps"""
        m.norm.eps = 1e-3

    def variant():
        """a variant forced"""
        m.set_variant(m.sgk_layer(device).variants(2, 9)[0].name)

    def closed():
        """the layer closed by its user"""
        m.sgk_layer(device).close()

    with torch.no_grad():
        assert m(*x) is not None and len(python_calls) == 1 and m._sgk.plan is not None
        first = step(nothing, x, 0)
        for change in (in_place, replaced, data_set, uncounted, eps, variant, closed):
            step(change, x, 1)
        shapes = inputs(3, 5, D, P, device, 32)
        step(nothing, shapes, 1)
        step(nothing, (shapes[0], shapes[1], shapes[2].bool()), 1)
        nt = shapes[0].transpose(0, 1).contiguous().transpose(0, 1)
        before = len(python_calls)
        close(m(nt, *shapes[1:]), reference_of(m)(nt.double(), shapes[1].double(), shapes[2]))
        assert len(python_calls) == before + 1, "a non-contiguous input takes the Python path"
        with pytest.raises(ValueError, match="nodes must be"):
            m(x[0][..., :16], x[1], x[2])  # refused with the Python path's message
        assert not torch.equal(first, m(*x)), "the weights did change"


@pytest.mark.parametrize("device", DEVICES)
def test_autograd_matches_reference(device):
    B, N, D, H, P = 2, 9, 32, 4, 6
    m = randomise(st.RelationUpdate(D, P, H), 5).to(device)
    ref = reference_of(m)
    x = inputs(B, N, D, P, device, 6)
    nodes, pair = x[0].clone().requires_grad_(), x[1].clone().requires_grad_()
    g = torch.randn(B, N, D, generator=torch.Generator().manual_seed(7)).to(device)
    (m(nodes, pair, x[2]) * g).sum().backward()
    n64, p64 = x[0].double().requires_grad_(), x[1].double().requires_grad_()
    (ref(n64, p64, x[2]) * g.double()).sum().backward()
    pairs = [("nodes", nodes.grad, n64.grad), ("pair_feats", pair.grad, p64.grad)]
    pairs += [(k, p.grad, dict(ref.named_parameters())[k].grad) for k, p in m.named_parameters()]
    for name, got, want in pairs:
        assert got is not None, name
        # Relative, with an absolute floor: the gradient of rel_mlp.2.bias is
        # zero in exact arithmetic (softmax ignores a shift of its row).
        diff, allowed = (got.double() - want).norm(), 1e-4 * want.norm() + 1e-6 * want.numel() ** 0.5
        assert diff <= allowed, f"d{name}: |diff| {diff:.3e} > {allowed:.3e} (|want| {want.norm():.3e})"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cpu_16bit_autograd_is_sgks_and_near_fp64(monkeypatch, dtype):
    """A 16-bit module on CPU tensors: autograd runs sgk's backward, and its
    gradients (in the dtype) are within the 16-bit contract (relative L2
    <= 1e-2) of the float64 reference's on the same rounded values."""
    from sgk.torch import module
    calls = []
    real = module._sgk_backward
    monkeypatch.setattr(module, "_sgk_backward", lambda *a: calls.append(1) or real(*a))
    B, N, D, H, P = 2, 7, 32, 4, 6
    m = randomise(st.RelationUpdate(D, P, H), 12).to(dtype)
    ref = reference_of(m)
    x = inputs(B, N, D, P, "cpu", 13)
    nodes, pair = x[0].to(dtype).requires_grad_(), x[1].to(dtype).requires_grad_()
    g = torch.randn(B, N, D, generator=torch.Generator().manual_seed(14)).to(dtype)
    (m(nodes, pair, x[2]) * g).sum().backward()
    assert calls == [1]
    n64, p64 = nodes.detach().double().requires_grad_(), pair.detach().double().requires_grad_()
    (ref(n64, p64, x[2]) * g.double()).sum().backward()
    pairs = [("nodes", nodes.grad, n64.grad), ("pair_feats", pair.grad, p64.grad)]
    pairs += [(k, p.grad, dict(ref.named_parameters())[k].grad) for k, p in m.named_parameters()]
    for name, got, want in pairs:
        assert got is not None and got.dtype == dtype, name
        diff, allowed = (got.double() - want).norm(), 1e-2 * want.norm() + 1e-3 * want.numel() ** 0.5
        assert diff <= allowed, f"d{name}: |diff| {diff:.3e} > {allowed:.3e} (|want| {want.norm():.3e})"


def test_cpu_backward_is_sgks(monkeypatch):
    """On CPU tensors autograd runs sgk's backward, not the reference's, on
    the softmax statistics the module's forward kept (B, H, N)."""
    from sgk.torch import module
    calls = []
    real = module._sgk_backward
    monkeypatch.setattr(module, "_sgk_backward", lambda *a: calls.append(a[-1]) or real(*a))
    m = randomise(st.RelationUpdate(16, 4, 2), 9)
    x = inputs(2, 5, 16, 4, "cpu", 10)
    nodes = x[0].clone().requires_grad_()
    m(nodes, x[1], x[2]).sum().backward()
    assert len(calls) == 1 and tuple(calls[0].shape) == (2, 2, 5)
    assert nodes.grad is not None and m.q_proj.weight.grad is not None


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    m = randomise(st.RelationUpdate(32, 4, 2), 8).to(device)
    x = inputs(2, 6, 32, 4, device, 9)
    w = [p.detach() for p in m._weights()]
    for args in ([*x, w, 1e-5, -1], [*x, w, 1e-5, m._sgk.id]):
        torch.library.opcheck(torch.ops.sgk.relation_update.default, tuple(args))
    torch.library.opcheck(torch.ops.sgk.relation_update.default,
                          (x[0].requires_grad_(), x[1], x[2], w, 1e-5, m._sgk.id))
    torch.library.opcheck(torch.ops.sgk.relation_update_train.default,
                          (x[0].requires_grad_(), x[1], x[2], w, 1e-5, m._sgk.id))


@pytest.mark.parametrize("device", DEVICES)
def test_functional_form_equals_module(device):
    m = randomise(st.RelationUpdate(48, 6, 3), 10).to(device)
    x = inputs(2, 11, 48, 6, device, 11)
    with torch.no_grad():
        a = m(*x)
        b = st.relation_update(*x, [p for p in m._weights()], m.norm.eps)
    assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(device):
    m = randomise(st.RelationUpdate(64, 8, 4), 12).to(device)
    x = inputs(2, 16, 64, 8, device, 13)
    with torch.no_grad():
        eager = m(*x)
        compiled = torch.compile(m, fullgraph=True)
        assert torch.equal(compiled(*x), eager)
        m.k_proj.weight.mul_(0.5)  # a compiled module follows weight changes too
        close(compiled(*x), reference_of(m)(x[0].double(), x[1].double(), x[2]))


def test_noncontiguous_inputs_are_copied():
    m = randomise(st.RelationUpdate(32, 4, 2), 14)
    nodes, pair, mask = inputs(2, 8, 32, 4, "cpu", 15)
    nt = nodes.transpose(0, 1).contiguous().transpose(0, 1)
    pt = pair.permute(3, 0, 1, 2).contiguous().permute(1, 2, 3, 0)
    assert not nt.is_contiguous() and not pt.is_contiguous()
    with torch.no_grad():
        assert torch.equal(m(nt, pt, mask), m(nodes, pair, mask))


BAD = [
    ("nodes float64", lambda x: (x[0].double(), x[1], x[2]), TypeError, "nodes has dtype torch.float64"),
    ("pair float16", lambda x: (x[0], x[1].half(), x[2]), TypeError,
     "pair_feats has dtype torch.float16 but the weights torch.float32"),
    ("mask int32", lambda x: (x[0], x[1], x[2].int()), TypeError, "edge_mask has dtype torch.int32"),
    ("nodes 2-D", lambda x: (x[0][0], x[1], x[2]), ValueError, "nodes must be (B, N, D=32)"),
    ("wrong D", lambda x: (x[0][..., :16], x[1], x[2]), ValueError, "nodes must be (B, N, D=32)"),
    ("pair wrong N", lambda x: (x[0], x[1][:, :, :3], x[2]), ValueError, "pair_feats must be (B, N, N, P)"),
    ("pair wrong P", lambda x: (x[0], x[1][..., :2], x[2]), ValueError, "pair_feats must be (B, N, N, P)"),
    ("mask wrong B", lambda x: (x[0], x[1], x[2][:1]), ValueError, "edge_mask must be (B, N, N)"),
]


@pytest.mark.parametrize("name,change,exc,text", BAD, ids=[b[0] for b in BAD])
def test_bad_input_refused(name, change, exc, text):
    m = randomise(st.RelationUpdate(32, 4, 2), 16)
    x = inputs(2, 6, 32, 4, "cpu", 17)
    with torch.no_grad():
        before = m(*x)
        with pytest.raises(exc, match=text.replace("(", r"\(").replace(")", r"\)")):
            m(*change(x))
        assert torch.equal(m(*x), before), "a refused call leaves the layer as it was"


def test_bad_weights_refused():
    m = st.RelationUpdate(32, 4, 2).double()
    x = inputs(1, 4, 32, 4, "cpu", 18)
    with pytest.raises(TypeError, match="norm.weight has dtype torch.float64"):
        m(x[0].double(), x[1].double(), x[2])
    m = st.RelationUpdate(32, 4, 2)
    m.q_proj.to(torch.bfloat16)
    with pytest.raises(TypeError, match="q_proj.weight has dtype torch.bfloat16 but norm.weight torch.float32"):
        m(*x)
    m = st.RelationUpdate(32, 4, 2)
    with torch.no_grad():
        with pytest.raises(ValueError, match="rel_mlp.0.weight must have shape"):
            st.relation_update(*x, [p.detach() for p in m._weights()][:6]
                               + [torch.zeros(4, 5)] + [p.detach() for p in m._weights()][7:])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_16bit_matches_reference_on_rounded_values(dtype):
    """module.to(dtype) on CPU tensors: the cpu backend's 16-bit layer,
    within rel L2 1e-2 of the float64 reference on the same rounded weights
    and inputs (SPEC section 6); rows with no edge return their input bit
    for bit; a later float32 module runs float32 again."""
    m = randomise(st.RelationUpdate(48, 8, 4), 30)
    nodes, pair, mask = inputs(2, 19, 48, 8, "cpu", 31)
    m16 = m.to(dtype)
    n16, p16 = nodes.to(dtype), pair.to(dtype)
    with torch.no_grad():
        out = m16(n16, p16, mask)
        want = reference_of(m16)(n16.double(), p16.double(), mask)
    assert out.dtype == dtype and out.shape == nodes.shape
    err = (out.double() - want).norm() / want.norm()
    assert err <= 1e-2, f"rel L2 {err:.3e}"
    empty = ~(mask != 0).any(-1)
    assert torch.equal(out[empty], n16[empty])
    m32 = m16.float()
    with torch.no_grad():
        close(m32(nodes, pair, mask), reference_of(m32)(nodes.double(), pair.double(), mask))


def test_16bit_autograd_recomputes():
    """bf16 gradients come from the recomputation through PyTorch ops (sgk's
    backward runs float32 layers), close to the float32 module's."""
    m = randomise(st.RelationUpdate(16, 4, 2), 32)
    nodes, pair, mask = inputs(1, 6, 16, 4, "cpu", 33)
    mb = st.RelationUpdate(16, 4, 2).to(torch.bfloat16)
    mb.load_state_dict(m.state_dict())
    nb = nodes.bfloat16().requires_grad_(True)
    mb(nb, pair.bfloat16(), mask).float().square().sum().backward()
    n32 = nb.detach().float().requires_grad_(True)
    m(n32, pair.bfloat16().float(), mask).square().sum().backward()
    err = (nb.grad.double() - n32.grad.double()).norm() / n32.grad.double().norm()
    assert err <= 5e-2, f"rel L2 {err:.3e}"


def test_openmp_beside_torch_threads():
    """libsgk's OpenMP runtime and PyTorch's in one process, at once."""
    m = randomise(st.RelationUpdate(64, 8, 4), 19)
    x = inputs(2, 24, 64, 8, "cpu", 20)
    with torch.no_grad():
        want_sgk = m(*x)
    a, b = torch.randn(256, 256, dtype=torch.float64), torch.randn(256, 256, dtype=torch.float64)
    want_mm = a @ b
    errors = []

    def run_torch():
        try:
            for _ in range(40):
                assert torch.allclose(a @ b, want_mm)
        except Exception as e:  # reported by the main thread
            errors.append(e)

    def run_sgk():
        try:
            with torch.no_grad():
                for _ in range(20):
                    assert torch.equal(m(*x), want_sgk)
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=f) for f in (run_torch, run_sgk, run_torch, run_sgk)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors


@cuda_only
def test_cuda_graph_capture_and_weight_updates():
    m = randomise(st.RelationUpdate(96, 16, 4), 21).cuda()
    frozen = randomise(st.RelationUpdate(96, 16, 4, repack_in_graphs=False), 21).cuda()
    x = inputs(4, 24, 96, 16, "cuda", 22)
    graphs = {}
    with torch.no_grad():
        for name, mod in (("tracking", m), ("frozen", frozen)):
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                mod(*x)  # makes the sgk layer before the capture
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                y = mod(*x)
            graphs[name] = (g, y)
        eager = m(*x)
        for name, (g, y) in graphs.items():
            y.fill_(float("nan"))
            g.replay()
            assert torch.equal(y, eager), name
        old = eager.clone()
        for mod in (m, frozen):
            mod.v_proj.weight.mul_(-0.75)
        for name, (g, y) in graphs.items():
            g.replay()
        torch.cuda.synchronize()
        close(graphs["tracking"][1], reference_of(m)(x[0].double(), x[1].double(), x[2]))
        assert torch.equal(graphs["frozen"][1], old), "repack_in_graphs=False replays the captured weights"


@cuda_only
def test_first_call_under_capture_is_refused():
    m = st.RelationUpdate(32, 4, 2).cuda()
    x = inputs(1, 4, 32, 4, "cuda", 23)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), pytest.raises(RuntimeError, match="run the module once"):
        with torch.cuda.graph(g):
            m(*x)


@cuda_only
def test_non_default_stream():
    m = randomise(st.RelationUpdate(256, 32, 8), 24).cuda()
    x = inputs(8, 64, 256, 32, "cuda", 25)
    with torch.no_grad():
        want = m(*x)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            out = m(*x)
            m.out_proj.weight.mul_(2.0)  # the repack goes on s too, after the forward
            out2 = m(*x)
        s.synchronize()
    assert torch.equal(out, want)
    close(out2, reference_of(m)(x[0].double(), x[1].double(), x[2]))


@cuda_only
def test_tensors_on_two_devices_refused():
    m = st.RelationUpdate(32, 4, 2).cuda()
    x = inputs(1, 4, 32, 4, "cuda", 26)
    with torch.no_grad(), pytest.raises(ValueError, match="pair_feats is on cpu but nodes on cuda"):
        m(x[0], x[1].cpu(), x[2])
    with torch.no_grad(), pytest.raises(ValueError, match="norm.weight is on cpu but nodes on cuda"):
        st.RelationUpdate(32, 4, 2)(*x)


two_gpus = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                              reason="needs two CUDA devices")


@two_gpus
def test_tensors_of_another_device_than_the_current():
    """A module on cuda:1's tensors from a thread whose current device is
    cuda:0 computes on cuda:1 and leaves cuda:0 current; its output is the
    one computed with cuda:1 current, bit for bit, forward and backward."""
    m = randomise(st.RelationUpdate(64, 8, 4), 27).to("cuda:1")
    x = inputs(2, 20, 64, 8, "cuda:1", 28)
    g = torch.randn(2, 20, 64, generator=torch.Generator().manual_seed(29)).to("cuda:1")

    def run():
        nodes = x[0].clone().requires_grad_()
        out = m(nodes, x[1], x[2])
        (out * g).sum().backward()
        torch.cuda.synchronize("cuda:1")
        grads = [nodes.grad] + [p.grad.clone() for p in m.parameters()]
        m.zero_grad(set_to_none=True)
        return out.detach(), grads

    with torch.cuda.device(1):
        want, want_g = run()
    with torch.cuda.device(0):
        got, got_g = run()
        assert torch.cuda.current_device() == 0
    assert torch.equal(got, want)
    assert all(torch.equal(a, b) for a, b in zip(got_g, want_g))


@two_gpus
def test_foreign_device_pointer_refused():
    """sgk_forward_device of a layer on cuda:1 given nodes on cuda:0:
    sgk.Error (invalid argument) naming nodes and the devices; out untouched."""
    from sgk import _lib
    import ctypes
    m = randomise(st.RelationUpdate(32, 4, 2), 30).to("cuda:1")
    x = inputs(1, 6, 32, 4, "cuda:1", 31)
    with torch.no_grad():
        m(*x)
    layer = m.sgk_layer("cuda:1")
    lib = _lib.lib()
    ws = ctypes.c_size_t()
    _lib.check(lib.sgk_workspace_size(layer._handle(), 1, 6, ctypes.byref(ws)))
    work = torch.empty(max(ws.value, 1), dtype=torch.uint8, device="cuda:1")
    out = torch.full_like(x[0], float("nan"))
    nodes0 = x[0].to("cuda:0")
    with pytest.raises(sgk.Error, match="nodes is memory of CUDA device 0"):
        _lib.check(lib.sgk_forward_device(layer._handle(), 1, 6, nodes0.data_ptr(), x[1].data_ptr(),
                                          x[2].data_ptr(), _lib.MASK_F32, out.data_ptr(), work.data_ptr(),
                                          ws.value, None))
    assert torch.isnan(out).all()
