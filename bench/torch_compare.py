#!/usr/bin/env python3
"""Times the PyTorch module of SPEC section 1 and sgk in one process, on the
same inputs and the same weights, and prints how they compare per preset.

PyTorch: eager, torch.compile (default) and torch.compile
(max-autotune-no-cudagraphs), each also replayed from a CUDA graph on CUDA;
TF32 off. sgk: called through its C API (ctypes on libsgk.so) on the very
tensors PyTorch uses (data_ptr()), on PyTorch's current stream, with
sgk_forward_device on the cuda backend (also captured in a CUDA graph with
torch.cuda.graph) and sgk_forward on CPU tensors. Every variant is checked
against a float64 copy of the module (rel L2 <= 1e-5). Timing follows
shared/anchors/bench_anchors.py: CUDA events around a loop of calls, median
of 5 loops (on the CPU: perf_counter, as bench_cpu.py).

example (H200):
  python3 bench/torch_compare.py --lib build/api/libsgk.so --json out.json
  python3 bench/torch_compare.py --device cpu --presets seed,mid
"""
import argparse
import ctypes
import ctypes.util
import json
import os
import platform
import statistics
import sys
import time

PRESETS = {"seed": (4, 24, 96, 4, 16), "mid": (32, 64, 256, 8, 32),
           "large": (8, 512, 256, 8, 32), "xl": (2, 2048, 256, 8, 16)}
REL_L2_TOL = 1e-5
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


# ---- sgk through ctypes -----------------------------------------------------

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


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def find_libsgk(explicit):
    if explicit:
        return explicit
    for build in ("build", "builddir", "_build"):
        for root in (os.getcwd(), REPO):
            p = os.path.join(root, build, "api", "libsgk.so")
            if os.path.exists(p):
                return p
    found = ctypes.util.find_library("sgk")
    if found:
        return found
    sys.exit("torch_compare: libsgk.so not found; build sgk and pass --lib build/api/libsgk.so")


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


# ---- timing ---------------------------------------------------------------

def t_events(fn, iters, reps=5):
    import torch
    meds = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        s.record()
        for _ in range(iters):
            fn()
        e.record()
        torch.cuda.synchronize()
        meds.append(s.elapsed_time(e) * 1000 / iters)
    return statistics.median(meds), min(meds), max(meds)


def t_host(fn, iters, reps=5):
    if iters is None:
        t0 = time.perf_counter()
        fn()
        iters = max(3, min(200, int(0.5 / max(1e-6, time.perf_counter() - t0))))
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        ts.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(ts), min(ts), max(ts)


def graph_of(fn):
    """fn captured in a CUDA graph: a function that replays it and returns the
    captured call's output tensor (so the check reads what the graph wrote)."""
    import torch
    st = torch.cuda.Stream()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(st)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = fn()

    def replay():
        g.replay()
        return y
    replay.graph = g  # keep the graph alive with the function
    return replay


# ---- one preset ------------------------------------------------------------

def run_preset(a, name, shape, sgk, model_ref):
    import torch
    B, N, D, H, P = shape
    dev = a.device
    on_cuda = dev.startswith("cuda")
    # Each preset compiles afresh, as when run alone: otherwise torch.compile
    # marks the sizes dynamic once a second shape arrives, and the later
    # presets get generic kernels (on the H200, large compiled after seed
    # and mid took about 1.6 times as long as large compiled alone).
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = model_ref.Model(D, P, H).to(dev).eval()
    x = model_ref.make_inputs(B, N, D, P, dev)
    iters = a.iters or (200 if N <= 64 else 20)
    res = {"shape": dict(B=B, N=N, D=D, H=H, P=P), "torch": {}, "sgk": {}}

    with torch.no_grad():
        ref = model_ref.Model(D, P, H).double().to(dev)
        ref.load_state_dict(m.state_dict())
        yref = ref(*[t.double() for t in x])

        def err(y):
            return ((y.double() - yref).norm() / yref.norm()).item()

        def timed(fn):
            return t_events(fn, iters) if on_cuda else t_host(fn, a.iters)

        def record(table, label, fn, poison=None):
            t0 = time.time()
            try:
                for _ in range(3):
                    fn()
                if poison is not None:
                    poison()  # the checked call must write every element
                e = err(fn())
                med, lo, hi = timed(fn)
                table[label] = dict(us=med, lo=lo, hi=hi, err=e, ok=e <= REL_L2_TOL, warm_s=time.time() - t0)
                return True
            except Exception as ex:  # a variant that fails is reported, not fatal
                table[label] = dict(error=str(ex)[:300])
                return False

        # PyTorch
        variants = {}
        if "eager" in a.torch_variants:
            variants["eager"] = lambda: m(*x)
        if "compile" in a.torch_variants:
            mc = torch.compile(m)
            variants["compile"] = lambda: mc(*x)
        if "compile-max-autotune" in a.torch_variants:
            m2 = model_ref.Model(D, P, H).to(dev).eval()
            m2.load_state_dict(m.state_dict())
            mro = torch.compile(m2, mode="max-autotune-no-cudagraphs")
            variants["compile-max-autotune"] = lambda: mro(*x)
        for vn, fn in variants.items():
            if record(res["torch"], vn, fn) and on_cuda and not a.no_graph:
                try:
                    record(res["torch"], vn + "+graph", graph_of(fn))
                except Exception as ex:
                    res["torch"][vn + "+graph"] = dict(error=str(ex)[:300])

        # sgk, on the same tensors and the same stream
        backend = a.backend or ("cuda" if on_cuda else "cpu")
        index = torch.cuda.current_device() if on_cuda else 0
        layer = SgkLayer(sgk, backend, index, m, a.threads)
        res["sgk_backend"] = backend
        res["sgk_device"] = layer.device_name(backend, index)
        try:
            names, auto = layer.variants(B, N)
            res["sgk_auto_variant"] = auto
            for vn, supported in names:
                if not supported or (a.sgk_variants and vn not in a.sgk_variants):
                    continue
                layer.set_variant(vn)
                out = torch.empty_like(x[0])
                run, keep = layer.caller(x[0], x[1], x[2], out, on_cuda)

                def call(run=run, out=out):
                    run()
                    return out
                label = vn + ("*" if vn == auto else "")
                poison = (lambda out=out: out.fill_(float("nan")))
                if record(res["sgk"], label, call, poison) and on_cuda and not a.no_graph:
                    try:
                        record(res["sgk"], label + "+graph", graph_of(call), poison)
                    except Exception as ex:
                        res["sgk"][label + "+graph"] = dict(error=str(ex)[:300])
                del keep
        finally:
            layer.close()
    return res


def best(table, graph=None):
    rows = [(k, v) for k, v in table.items() if "us" in v and v["ok"]
            and (graph is None or k.endswith("+graph") == graph)]
    return min(rows, key=lambda kv: kv[1]["us"]) if rows else None


def report(name, res):
    print(f"{name:6s} B{res['shape']['B']} N{res['shape']['N']} D{res['shape']['D']} "
          f"H{res['shape']['H']} P{res['shape']['P']}   sgk {res.get('sgk_backend')} on {res.get('sgk_device')}",
          flush=True)
    for side in ("torch", "sgk"):
        for vn, r in res[side].items():
            if "us" in r:
                flag = "" if r["ok"] else "  MISMATCH"
                print(f"   {side:5s} {vn:28s} {r['us']:10.2f} us  [{r['lo']:.2f},{r['hi']:.2f}]  "
                      f"relerr {r['err']:.2e}{flag}")
            else:
                print(f"   {side:5s} {vn:28s} failed: {r['error']}")
    ratios = {}
    for label, graph in (("best", None), ("no graph", False), ("graph", True)):
        t, s = best(res["torch"], graph), best(res["sgk"], graph)
        if t and s:
            ratios[label] = dict(torch=t[0], torch_us=t[1]["us"], sgk=s[0], sgk_us=s[1]["us"],
                                 ratio=t[1]["us"] / s[1]["us"])
            print(f"   ratio ({label}): torch {t[0]} {t[1]['us']:.2f} us / sgk {s[0]} {s[1]['us']:.2f} us "
                  f"= {t[1]['us'] / s[1]['us']:.2f}x", flush=True)
    res["ratio"] = ratios


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--presets", default="seed,mid,large,xl", help="comma list (default: all four)")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    ap.add_argument("--anchors", help="folder holding model_ref.py (default: ../shared/anchors)")
    ap.add_argument("--lib", help="path of libsgk.so (default: build/api/libsgk.so, then the system)")
    ap.add_argument("--backend", help="sgk backend (default: cuda on CUDA tensors, cpu on CPU tensors)")
    ap.add_argument("--sgk-variants", help="comma list of sgk variants (default: every supported one)")
    ap.add_argument("--torch-variants", default="eager,compile,compile-max-autotune",
                    help="comma list of eager, compile, compile-max-autotune")
    ap.add_argument("--iters", type=int, help="calls per timed loop (default: as bench_anchors.py)")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads for torch and sgk (default: their defaults)")
    ap.add_argument("--no-graph", action="store_true", help="skip the CUDA graph variants")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    a.torch_variants = a.torch_variants.split(",")
    a.sgk_variants = a.sgk_variants.split(",") if a.sgk_variants else None

    candidates = [a.anchors] if a.anchors else [os.path.join(root, *rel) for root in (os.getcwd(), REPO)
                                                 for rel in (("..", "shared", "anchors"), ("shared", "anchors"))]
    anchors = next((c for c in candidates if os.path.exists(os.path.join(c, "model_ref.py"))), None)
    if not anchors:
        sys.exit(f"torch_compare: model_ref.py not found in {candidates}; pass --anchors")
    sys.path.insert(0, os.path.abspath(anchors))
    import torch
    import model_ref

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if a.device.startswith("cuda"):
        if not torch.cuda.is_available():
            sys.exit("torch_compare: CUDA is not available to PyTorch here; use --device cpu")
        if torch.device(a.device).index is not None:
            torch.cuda.set_device(torch.device(a.device))
    if a.threads:
        torch.set_num_threads(a.threads)

    sgk = Sgk(find_libsgk(a.lib))
    out = {"format": "sgk-torch-compare/1",
           "machine": {"host": platform.node(), "torch": torch.__version__,
                       "cuda": torch.version.cuda, "device": a.device,
                       "device_name": torch.cuda.get_device_name() if a.device.startswith("cuda") else cpu_name(),
                       "torch_threads": torch.get_num_threads(), "sgk_version": sgk.version(),
                       "anchors": os.path.abspath(anchors)},
           "presets": {}}
    failed = False
    for name in a.presets.split(","):
        if name not in PRESETS:
            sys.exit(f"torch_compare: unknown preset {name!r} (seed, mid, large, xl)")
        res = run_preset(a, name, PRESETS[name], sgk, model_ref)
        report(name, res)
        out["presets"][name] = res
        failed |= any("us" in r and not r["ok"] for side in ("torch", "sgk") for r in res[side].values())
        failed |= any("error" in r for r in res["sgk"].values())
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
