#!/usr/bin/env python3
"""Times sgk against PyTorch's own forms of the same layer, in one process,
on the same inputs and the same weights, and prints how they compare per
shape (SPEC section 4: the presets and the sweep).

PyTorch (fp32, TF32 off), the module python/sgk/torch/reference.py:
  eager                  RelationUpdate as written
  sdpa                   RelationUpdateSDPA: F.scaled_dot_product_attention,
                         the relation bias as its attn_mask
  compile                torch.compile of the eager module
  compile-max-autotune   torch.compile(mode="max-autotune-no-cudagraphs")
each also replayed from a CUDA graph on CUDA. The compiled ones run at the
presets; at the sweep shapes only with --compile-sweep (minutes a shape).
sgk: the module sgk.torch.RelationUpdate of the Python package (python/sgk),
loaded with the same state dict, on the very tensors PyTorch uses and on
PyTorch's current stream (the cuda backend on CUDA tensors, also captured in
a CUDA graph; the cpu backend on CPU tensors); every variant that supports
the shape. At each shape, sgk's Python overhead is the automatic variant's
time per call from Python without a graph less its time replayed from a
graph. Every variant is checked against a float64 copy of the module (rel
L2 <= 1e-5). With --train each form runs forward and backward instead (the
output's gradient into fresh gradients of the inputs and every weight; sgk
through its autograd, which is sgk_forward_train_device and
sgk_backward_device), every gradient checked against float64 autograd (rel
L2 <= 1e-4, the reference norm floored). Timing follows
shared/anchors/bench_anchors.py: CUDA events around a loop of calls, median
of 5 loops (perf_counter on the CPU).

Each shape's summary gives sgk's best time without and with a graph,
PyTorch's best and which variant, their ratio (above 1: sgk is faster) and
the floors: FFMA floor = FLOP / fp32 FMA peak, copy floor = bytes / copy
bandwidth (work model of bench/README.md). The peaks: --peak-gflops and
--peak-gbps, else from the device (CUDA: SMs x clock x FP32 lanes x 2, and
a timed tensor copy; CPU: a timed tensor copy, no FMA peak), else the
H200's of SPEC section 5 (67000 GFLOP/s, 3980 GB/s).

examples:
  python3 bench/torch_compare.py --lib build/api/libsgk.so --json out.json
  python3 bench/torch_compare.py --preset sweep --json sweep.json
  python3 bench/torch_compare.py --preset seed,s07 --device cpu
  python3 bench/torch_compare.py --train --preset mid,s02 --torch-variants eager,sdpa,compile
  python3 bench/torch_compare.py --preset all --dry-run      (needs no torch)
  python3 bench/torch_compare.py --summary out.json          (needs no torch)
"""
import argparse
import contextlib
import glob
import importlib.util
import json
import os
import platform
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# SPEC section 4, (B, N, D, H, P); sgk-bench has the same names (bench/sweep.c).
PRESETS = {"seed": (4, 24, 96, 4, 16), "mid": (32, 64, 256, 8, 32),
           "large": (8, 512, 256, 8, 32), "xl": (2, 2048, 256, 8, 16)}
SWEEP = {"s01": (1, 16, 256, 4, 8), "s02": (1, 100, 512, 8, 24), "s03": (2, 48, 1024, 16, 32),
         "s04": (8, 96, 192, 6, 16), "s05": (16, 80, 320, 5, 48), "s06": (32, 40, 64, 2, 8),
         "s07": (4, 300, 256, 16, 64), "s08": (2, 700, 384, 4, 24), "s09": (1, 1500, 128, 1, 16),
         "s10": (1, 3000, 256, 8, 8), "s11": (64, 24, 96, 4, 16), "s12": (3, 200, 1024, 4, 128),
         "s13": (12, 128, 768, 12, 32), "s14": (6, 512, 128, 8, 4)}
GROUPS = {"presets": list(PRESETS), "sweep": list(SWEEP), "all": list(PRESETS) + list(SWEEP)}
TORCH_VARIANTS = ("eager", "sdpa", "compile", "compile-max-autotune")
COMPILED = ("compile", "compile-max-autotune")
H200_PEAK_GFLOPS, H200_COPY_GBPS = 67000.0, 3980.0  # SPEC section 5
# SPEC section 6: fp32 within rel L2 1e-5 of the float64 module; bf16 and
# fp16 within 1e-2 of it on the same rounded weights and inputs (and no
# worse than PyTorch's module in that dtype: both errors are reported)
REL_L2_TOL = {"float32": 1e-5, "bfloat16": 1e-2, "float16": 1e-2}
# --train: each gradient within 1e-4 (fp32) of float64 autograd's
TRAIN_REL_L2_TOL = {"float32": 1e-4, "bfloat16": 1e-2, "float16": 1e-2}
ELEM_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
REFERENCE = os.path.join(REPO, "python", "sgk", "torch", "reference.py")
FORMAT = "sgk-torch-compare/2"


def parse_shapes(arg):
    """'seed,sweep' -> [(name, shape)], in order, each once."""
    names = []
    for item in arg.split(","):
        if item in GROUPS:
            names += GROUPS[item]
        elif item in PRESETS or item in SWEEP:
            names.append(item)
        else:
            raise ValueError(f"unknown preset {item!r} (seed, mid, large, xl, s01 .. s14, presets, sweep, all)")
    return [(n, PRESETS.get(n) or SWEEP[n]) for n in dict.fromkeys(names)]


def work(shape, elem=4):
    """FLOP and bytes of one call, elem bytes an element of the data and
    weights, f32 mask (bench/README.md, bench/model.c)."""
    B, N, D, H, P = shape
    flop = 8 * B * N * D * D + B * N * N * (2 * P * P + 2 * P * H) + 4 * B * N * N * D
    nbytes = (elem * (2 * B * N * D + B * N * N * P) + 4 * B * N * N
              + elem * (4 * D * D + P * P + P + H * P + H + 2 * D))
    return flop, nbytes


def floors_of(shape, peaks, elem=4, times=1):
    """times: 3 for forward and backward (the backward counted as twice the
    forward, as sgk-bench's --train does)."""
    flop, nbytes = work(shape, elem)
    flop, nbytes = times * flop, times * nbytes
    g, b = peaks["peak_gflops"], peaks["copy_gbps"]
    return dict(flop=flop, bytes=nbytes, ffma_floor_us=flop / g / 1e3 if g else None,
                copy_floor_us=nbytes / b / 1e3 if b else None)


def torch_variants_at(a, name, on_cuda):
    """The PyTorch variants timed at one shape, graph replays included."""
    out = []
    for v in a.torch_variants:
        if v in COMPILED and name in SWEEP and not a.compile_sweep:
            continue
        out.append(v)
        if on_cuda and not a.no_graph:
            out.append(v + "+graph")
    return out


def load_reference():
    spec = importlib.util.spec_from_file_location("sgk_torch_reference", REFERENCE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_inputs(torch, B, N, D, P, device, density=0.7, seed=0):
    """The anchors' inputs (shared/anchors/model_ref.py's recipe): N(0, 1)
    nodes and pair features, a random mask with every self edge, so that no
    row is fully masked (SDPA would give NaN there)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    nodes = torch.randn(B, N, D, generator=g)
    pair = torch.randn(B, N, N, P, generator=g)
    mask = (torch.rand(B, N, N, generator=g) < density).float()
    mask[:, torch.arange(N), torch.arange(N)] = 1.0
    return nodes.to(device), pair.to(device), mask.to(device)


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# ---- timing ---------------------------------------------------------------

def t_events(torch, fn, iters, reps=5):
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


def graph_of(torch, fn):
    """fn captured in a CUDA graph: a function that replays it and returns the
    captured call's output tensor (so the check reads what the graph wrote)."""
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


def device_peaks(torch, a, on_cuda):
    """The floors' fp32 FMA peak and copy bandwidth, and where each came from."""
    if a.peak_gflops:
        gflops, gsrc = a.peak_gflops, "--peak-gflops"
    elif on_cuda:
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        lanes = 64 if (p.major, p.minor) in ((6, 0), (8, 0)) or p.major == 7 else 128
        mhz = getattr(p, "clock_rate", 0) / 1e3  # kHz, as cudaDevAttrClockRate
        if 100 <= mhz <= 10000:  # a clock in another unit, or none, falls back on the default
            gflops = p.multi_processor_count * mhz * lanes * 2 / 1e3
            gsrc = f"{p.multi_processor_count} SMs x {mhz:.0f} MHz x {lanes} FMA x 2 (sm_{p.major}{p.minor})"
        else:
            gflops, gsrc = H200_PEAK_GFLOPS, "H200 default of SPEC section 5; --peak-gflops sets this device's"
    else:
        gflops, gsrc = None, "unknown on the CPU (give --peak-gflops)"
    if a.peak_gbps:
        return dict(peak_gflops=gflops, peak_source=gsrc, copy_gbps=a.peak_gbps, copy_source="--peak-gbps")
    n = 64 << 20  # 256 MiB a buffer, past any cache
    dev = a.device
    try:
        src = torch.empty(n, dtype=torch.float32, device=dev).fill_(1.0)
        dst = torch.empty_like(src)
        fn = lambda: dst.copy_(src)
        fn()
        _, lo, _ = t_events(torch, fn, 10) if on_cuda else t_host(fn, 3)
        del src, dst
        return dict(peak_gflops=gflops, peak_source=gsrc, copy_gbps=2 * n * 4 / lo / 1e3,
                    copy_source="measured: tensor copy_, 2 x 256 MiB, best of 5")
    except RuntimeError as ex:  # out of memory, say
        if not on_cuda:
            return dict(peak_gflops=gflops, peak_source=gsrc, copy_gbps=None, copy_source=f"unknown ({ex})"[:200])
        return dict(peak_gflops=gflops, peak_source=gsrc, copy_gbps=H200_COPY_GBPS,
                    copy_source="H200 default of SPEC section 5; the copy could not be timed")


# ---- one shape --------------------------------------------------------------

def run_shape(torch, a, name, shape, ref, peaks):
    B, N, D, H, P = shape
    dev = a.device
    on_cuda = dev.startswith("cuda")
    wanted = torch_variants_at(a, name, on_cuda)
    # Each shape compiles afresh, as when run alone: otherwise torch.compile
    # marks the sizes dynamic once a second shape arrives, and later
    # shapes get generic kernels (on the H200, large compiled after seed
    # and mid took about 1.6 times as long as large compiled alone).
    torch._dynamo.reset()
    torch.manual_seed(0)
    dtype = getattr(torch, a.dtype)
    m = ref.RelationUpdate(D, P, H).to(dev).to(dtype).eval()
    nodes, pair, mask = make_inputs(torch, B, N, D, P, dev)
    x = (nodes.to(dtype), pair.to(dtype), mask)  # the mask stays float32
    tol = (TRAIN_REL_L2_TOL if a.train else REL_L2_TOL)[a.dtype]
    iters = a.iters or (200 if N <= 64 else 20)
    res = {"shape": dict(B=B, N=N, D=D, H=H, P=P), "torch": {}, "sgk": {}}
    res.update(floors_of(shape, peaks, ELEM_BYTES[a.dtype], 3 if a.train else 1))

    names = [k for k, _ in m.named_parameters()]
    if a.train:
        # the output's gradient, fixed; N(0, 1) as the nodes
        dy = torch.randn(B, N, D, generator=torch.Generator(device="cpu").manual_seed(1)).to(dev).to(dtype)
    with contextlib.nullcontext() if a.train else torch.no_grad():
        # float64 on the values the dtype holds: its rounded weights and inputs
        m64 = ref.RelationUpdate(D, P, H).double().to(dev)
        m64.load_state_dict(m.state_dict())
        if a.train:
            x64 = [t.double().requires_grad_(i < 2) for i, t in enumerate(x)]
            m64(*x64).backward(dy.double())
            p64 = dict(m64.named_parameters())
            want = [x64[0].grad, x64[1].grad] + [p64[k].grad for k in names]
        else:
            want = [m64(*[t.double() for t in x])]
        want = [w.detach() for w in want]
        del m64

        def err(ys):
            """The largest relative L2 error over the outputs (the output, or
            every gradient); each reference norm floored at 1e-2 sqrt(n) (an
            absolute 1e-6 per element at 1e-4, test_torch.py's bound), since
            b2's gradient is zero in exact arithmetic."""
            ys = ys if isinstance(ys, (list, tuple)) else [ys]
            return max(((y.double() - w).norm() / max(w.norm().item(), 1e-2 * w.numel() ** 0.5)).item()
                       for y, w in zip(ys, want))

        def call(mod, params):
            """What is timed: the forward, or (--train) forward and backward
            into fresh gradients of the inputs and every parameter."""
            if not a.train:
                return lambda: mod(*x)
            xs = [x[0].detach().clone().requires_grad_(), x[1].detach().clone().requires_grad_(), x[2]]

            def step():
                for t in params + xs[:2]:
                    t.grad = None
                mod(*xs).backward(dy)
                return [xs[0].grad, xs[1].grad] + [t.grad for t in params]
            return step

        def record(table, label, fn):
            t0 = time.time()
            try:
                for _ in range(3):
                    y = fn()
                # The checked call must write every element: poison the last
                # output, which is the buffer a graph replay writes again, and
                # the block the caching allocator hands the next eager call.
                for t in (y if isinstance(y, list) else [y]):
                    t.fill_(float("nan"))
                del y
                e = err(fn())
                med, lo, hi = t_events(torch, fn, iters) if on_cuda else t_host(fn, a.iters)
                table[label] = dict(us=med, lo=lo, hi=hi, err=e, ok=e <= tol, warm_s=time.time() - t0)
                return True
            except Exception as ex:  # a variant that fails is reported, not fatal
                table[label] = dict(error=str(ex)[:300])
                return False

        graphs = on_cuda and not a.no_graph

        def with_graph(table, label, fn):
            if record(table, label, fn) and graphs:
                try:
                    record(table, label + "+graph", graph_of(torch, fn))
                except Exception as ex:
                    table[label + "+graph"] = dict(error=str(ex)[:300])

        # PyTorch
        modules = {}
        for vn in a.torch_variants:
            if vn not in wanted:
                continue
            if vn == "eager":
                mod = m
            elif vn == "sdpa":
                mod = ref.RelationUpdateSDPA(D, P, H).to(dev).to(dtype).eval()
                mod.load_state_dict(m.state_dict())
            else:
                mod = ref.RelationUpdate(D, P, H).to(dev).to(dtype).eval()
                mod.load_state_dict(m.state_dict())
            params = [dict(mod.named_parameters())[k] for k in names]
            if vn in COMPILED:
                mod = torch.compile(mod, mode="max-autotune-no-cudagraphs" if vn == "compile-max-autotune"
                                    else None)
            modules[vn] = call(mod, params)
        for vn, fn in modules.items():
            with_graph(res["torch"], vn, fn)
        del modules

        # sgk, on the same tensors and the same stream
        import sgk.torch
        # The weights stay fixed here, so graphs need not replay a repack.
        sm = sgk.torch.RelationUpdate(D, P, H, repack_in_graphs=False,
                                      cpu_threads=a.threads).to(dev).to(dtype).eval()
        sm.load_state_dict(m.state_dict())
        with torch.no_grad():
            sm(*x)  # makes the sgk layer on this device
        layer = sm.sgk_layer(x[0].device)
        res["sgk_backend"] = layer.backend
        res["sgk_device"] = sgk.device_name(layer.backend, layer.device)
        auto = layer.variant_for(B, N)
        res["sgk_auto_variant"] = auto
        sgk_params = [dict(sm.named_parameters())[k] for k in names]
        for vn, supported in layer.variants(B, N):
            if not supported or (a.sgk_variants and vn not in a.sgk_variants):
                continue
            if a.train and vn != auto:
                continue  # the training calls run one design whatever the variant
            sm.set_variant(vn)
            label = vn + ("*" if vn == auto else "")
            with_graph(res["sgk"], label, call(sm, sgk_params))
        sm.set_variant(None)
        s, g = res["sgk"].get(auto + "*", {}), res["sgk"].get(auto + "*+graph", {})
        if "us" in s and "us" in g:
            res["sgk_python_overhead_us"] = s["us"] - g["us"]
    summarize(res)
    return res


# ---- results ----------------------------------------------------------------

def best(table, graph=None):
    rows = [(k, v) for k, v in table.items() if "us" in v and v["ok"]
            and (graph is None or k.endswith("+graph") == graph)]
    return min(rows, key=lambda kv: kv[1]["us"]) if rows else None


def summarize(res):
    """res["ratio"] (PyTorch's best over sgk's best: overall, without and with
    graphs on both sides) and res["summary"], the row of the summary table."""
    ratios = {}
    for label, graph in (("best", None), ("no graph", False), ("graph", True)):
        t, s = best(res["torch"], graph), best(res["sgk"], graph)
        if t and s:
            ratios[label] = dict(torch=t[0], torch_us=t[1]["us"], sgk=s[0], sgk_us=s[1]["us"],
                                 ratio=t[1]["us"] / s[1]["us"])
    res["ratio"] = ratios
    s, sg, t = best(res["sgk"], False), best(res["sgk"], True), best(res["torch"])
    sgk_best = min([r for r in (s, sg) if r], key=lambda kv: kv[1]["us"], default=None)
    known = [f for f in (res.get("ffma_floor_us"), res.get("copy_floor_us")) if f]
    floor = max(known) if known else None
    res["summary"] = dict(
        sgk=s[0] if s else None, sgk_us=s[1]["us"] if s else None,
        sgk_graph=sg[0] if sg else None, sgk_graph_us=sg[1]["us"] if sg else None,
        torch=t[0] if t else None, torch_us=t[1]["us"] if t else None,
        ratio=t[1]["us"] / sgk_best[1]["us"] if t and sgk_best else None,
        sgk_err=sgk_best[1]["err"] if sgk_best else None, torch_err=t[1]["err"] if t else None,
        floor_us=floor, sgk_floor_share=floor / sgk_best[1]["us"] if floor and sgk_best else None)


def report(name, res):
    sh = res["shape"]
    print(f"{name:6s} B{sh['B']} N{sh['N']} D{sh['D']} H{sh['H']} P{sh['P']}   "
          f"sgk {res.get('sgk_backend')} on {res.get('sgk_device')}", flush=True)
    for side in ("torch", "sgk"):
        for vn, r in res[side].items():
            if "us" in r:
                flag = "" if r["ok"] else "  MISMATCH"
                print(f"   {side:5s} {vn:28s} {r['us']:10.2f} us  [{r['lo']:.2f},{r['hi']:.2f}]  "
                      f"relerr {r['err']:.2e}{flag}")
            else:
                print(f"   {side:5s} {vn:28s} failed: {r['error']}")
    if "sgk_python_overhead_us" in res:
        print(f"   sgk Python overhead ({res['sgk_auto_variant']}): "
              f"{res['sgk_python_overhead_us']:.2f} us per call above a graph replay")
    for label, r in res["ratio"].items():
        print(f"   ratio ({label}): torch {r['torch']} {r['torch_us']:.2f} us / sgk {r['sgk']} {r['sgk_us']:.2f} us "
              f"= {r['ratio']:.2f}x", flush=True)


def fmt_us(x):
    if x is None:
        return "-"
    return f"{x:.3f}" if x < 1 else f"{x:.2f}" if x < 100 else f"{x:.1f}" if x < 10000 else f"{x:.0f}"


def summary_table(doc):
    """The summary, one line per shape, as text."""
    head = ["shape", "B,N,D,H,P", "sgk µs", "sgk+graph µs", "PyTorch best µs", "ratio", "FFMA floor µs",
            "copy floor µs", "sgk at floor", "rel L2 sgk / PyTorch"]
    lines = [head]
    for name, res in doc["shapes"].items():
        s, sh = res.get("summary") or {}, res["shape"]
        lines.append([
            name, "{B},{N},{D},{H},{P}".format(**sh),
            "-" if s.get("sgk_us") is None else f"{fmt_us(s['sgk_us'])} ({s['sgk']})",
            "-" if s.get("sgk_graph_us") is None else f"{fmt_us(s['sgk_graph_us'])} ({s['sgk_graph']})",
            "-" if s.get("torch_us") is None else f"{fmt_us(s['torch_us'])} ({s['torch']})",
            "-" if s.get("ratio") is None else f"{s['ratio']:.2f}x",
            fmt_us(res.get("ffma_floor_us")), fmt_us(res.get("copy_floor_us")),
            "-" if s.get("sgk_floor_share") is None else f"{100 * s['sgk_floor_share']:.1f}%",
            "-" if s.get("sgk_err") is None or s.get("torch_err") is None
            else f"{s['sgk_err']:.1e} / {s['torch_err']:.1e}"])
    width = [max(len(r[c]) for r in lines) for c in range(len(head))]
    right = {2, 3, 4, 5, 6, 7, 8, 9}
    text = ["  ".join(cell.rjust(width[c]) if c in right else cell.ljust(width[c])
                      for c, cell in enumerate(row)).rstrip() for row in lines]
    f = doc.get("floors", {})
    gsrc = f"{f['peak_gflops']:.0f} GFLOP/s ({f['peak_source']})" if f.get("peak_gflops") else f.get("peak_source", "-")
    bsrc = f"{f['copy_gbps']:.1f} GB/s ({f['copy_source']})" if f.get("copy_gbps") else f.get("copy_source", "-")
    train = doc["settings"].get("train")
    text += ["", "times are of forward and backward (--train); FLOP and bytes counted as three forwards" if train
             else "times are of the forward",
             "ratio = PyTorch's best / sgk's best, graphs included on both sides (above 1: sgk is faster);",
             f"FFMA floor = FLOP / fp32 FMA peak, {gsrc};",
             f"copy floor = bytes / copy bandwidth, {bsrc};",
             "sgk at floor = max(FFMA floor, copy floor) / sgk's best;",
             f"rel L2 = each best row's error against float64 on the same {doc['settings'].get('dtype', 'float32')} "
             "weights and inputs" + (" (the largest over the gradients)." if train else ".")]
    return "\n".join(text)


def dry_run(a, shapes, on_cuda):
    peaks = dict(peak_gflops=a.peak_gflops or (H200_PEAK_GFLOPS if on_cuda else None),
                 copy_gbps=a.peak_gbps or (H200_COPY_GBPS if on_cuda else None))
    print(f"dry run on {a.device}: nothing is timed; floors from "
          f"{'the H200 defaults' if on_cuda else 'none'} unless --peak-gflops / --peak-gbps "
          f"(a real run asks the device)")
    for name, shape in shapes:
        fl = floors_of(shape, peaks, ELEM_BYTES[a.dtype], 3 if a.train else 1)
        print(f"{name:6s} B,N,D,H,P {','.join(map(str, shape))}  {fl['flop'] / 1e9:.4g} GFLOP "
              f"{fl['bytes'] / 1e6:.4g} MB  FFMA floor {fmt_us(fl['ffma_floor_us'])} us  "
              f"copy floor {fmt_us(fl['copy_floor_us'])} us")
        print(f"   torch: {' '.join(torch_variants_at(a, name, on_cuda)) or '-'}")
        sgk_modes = "stream and graph" if on_cuda and not a.no_graph else "stream" if on_cuda else "sgk_forward"
        print(f"   sgk:   every variant that supports the shape"
              f"{' in ' + ','.join(a.sgk_variants) if a.sgk_variants else ''} ({sgk_modes})")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--preset", "--presets", dest="preset", default="presets",
                    help="comma list of seed, mid, large, xl, s01 .. s14 and the groups presets, sweep, "
                         "all (default: presets)")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    ap.add_argument("--lib", help="path of libsgk.so (default: $SGK_LIBRARY, else this clone's "
                    "build/api/libsgk.so, else as the sgk package finds it)")
    ap.add_argument("--sgk-variants", help="comma list of sgk variants (default: every supported one)")
    ap.add_argument("--torch-variants", default=",".join(TORCH_VARIANTS),
                    help=f"comma list of {', '.join(TORCH_VARIANTS)} (default: all)")
    ap.add_argument("--compile-sweep", action="store_true",
                    help="also time the torch.compile variants at the sweep shapes (slow)")
    ap.add_argument("--iters", type=int, help="calls per timed loop (default: as bench_anchors.py)")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads for torch and sgk (default: their defaults)")
    ap.add_argument("--dtype", default="float32", choices=tuple(REL_L2_TOL),
                    help="of the weights, nodes and pair features on both sides (default float32; bfloat16 "
                         "and float16: each checked against float64 on the rounded values, within 1e-2)")
    ap.add_argument("--train", action="store_true",
                    help="time forward and backward (the output's gradient into fresh gradients of nodes, "
                         "pair features and every weight) instead of the forward; each gradient checked "
                         "against float64 autograd (rel L2 <= 1e-4 in float32); sgk's automatic variant only")
    ap.add_argument("--no-graph", action="store_true", help="skip the CUDA graph variants")
    ap.add_argument("--peak-gflops", type=float, help="fp32 FMA peak for the FFMA floor")
    ap.add_argument("--peak-gbps", type=float, help="copy bandwidth (read + write) for the copy floor")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--dry-run", action="store_true",
                    help="list the shapes, their work and floors and the variants to time, then exit (no torch)")
    ap.add_argument("--summary", metavar="FILE", help="print the summary table of a --json file, then exit")
    a = ap.parse_args()

    if a.summary:
        with open(a.summary) as f:
            doc = json.load(f)
        if doc.get("format") != FORMAT:
            sys.exit(f"torch_compare: {a.summary}: format {doc.get('format')!r}, expected {FORMAT!r}")
        print(summary_table(doc))
        return 0
    try:
        shapes = parse_shapes(a.preset)
    except ValueError as ex:
        sys.exit(f"torch_compare: {ex}")
    a.torch_variants = a.torch_variants.split(",")
    bad = [v for v in a.torch_variants if v not in TORCH_VARIANTS]
    if bad:
        sys.exit(f"torch_compare: unknown --torch-variants {bad} ({', '.join(TORCH_VARIANTS)})")
    a.sgk_variants = a.sgk_variants.split(",") if a.sgk_variants else None
    for flag in ("peak_gflops", "peak_gbps"):
        if getattr(a, flag) is not None and not getattr(a, flag) > 0:
            sys.exit(f"torch_compare: --{flag.replace('_', '-')} must be > 0")
    on_cuda = a.device.startswith("cuda")
    if a.dry_run:
        return dry_run(a, shapes, on_cuda)

    import torch
    ref = load_reference()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    if on_cuda:
        if not torch.cuda.is_available():
            sys.exit("torch_compare: CUDA is not available to PyTorch here; use --device cpu")
        if torch.device(a.device).index is not None:
            torch.cuda.set_device(torch.device(a.device))
    if a.threads:
        torch.set_num_threads(a.threads)

    built = os.path.join(REPO, "build", "api", "libsgk.so")
    if a.lib or (not os.environ.get("SGK_LIBRARY") and os.path.exists(built)):
        os.environ["SGK_LIBRARY"] = os.path.abspath(a.lib or built)
    if os.environ.get("SGK_LIBRARY") and not os.environ.get("SGK_EXTENSION"):
        # sgk._fast as the build beside that libsgk made it (build/python/)
        ext = glob.glob(os.path.join(os.path.dirname(os.environ["SGK_LIBRARY"]), "..", "python", "_fast*.so"))
        if ext:
            os.environ["SGK_EXTENSION"] = os.path.abspath(ext[0])
    sys.path.insert(0, os.path.join(REPO, "python"))  # this clone's sgk package
    import sgk
    import sgk.torch
    try:
        sgk_version = sgk.version()
    except sgk.Error as e:
        sys.exit(f"torch_compare: {e}")
    sgk_fast = sgk.torch.module._FAST is not None  # the module's inference call in C
    print(f"sgk.torch inference call: {'in C (sgk._fast)' if sgk_fast else 'Python (sgk._fast not found)'}")
    peaks = device_peaks(torch, a, on_cuda)
    out = {"format": FORMAT,
           "machine": {"host": platform.node(), "torch": torch.__version__,
                       "cuda": torch.version.cuda, "device": a.device,
                       "device_name": torch.cuda.get_device_name() if on_cuda else cpu_name(),
                       "torch_threads": torch.get_num_threads(), "sgk_version": sgk_version,
                       "sgk_fast": sgk_fast,
                       "reference": os.path.relpath(REFERENCE, REPO)},
           "settings": {"dtype": a.dtype, "train": a.train, "tf32": False, "iters": a.iters,
                        "torch_variants": a.torch_variants, "compile_sweep": a.compile_sweep,
                        "graphs": on_cuda and not a.no_graph},
           "floors": peaks,
           "shapes": {}}
    failed = False
    for name, shape in shapes:
        res = run_shape(torch, a, name, shape, ref, peaks)
        report(name, res)
        out["shapes"][name] = res
        failed |= any("us" in r and not r["ok"] for side in ("torch", "sgk") for r in res[side].values())
        failed |= any("error" in r for r in res["sgk"].values())
        if a.json:  # after every shape, so that a run cut short keeps what it measured
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)
    print()
    print(summary_table(out))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
