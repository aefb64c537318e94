# cuBLAS fp32 (TF32 off) on the projection shapes of mid, large and xl: a reference point for
# gemm_panel.cuh and sgemm.cuh (DESIGN.md). Each figure is a CUDA-graph replay of 20 calls,
# the median of 7; then the kernel cuBLAS picked, from the profiler. Usage on the H200: python3 cublas_ref.py
import torch, time
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
dev = "cuda"
shapes = [("mid qkv", 2048, 768, 256), ("mid out", 2048, 256, 256), ("large/xl qkv", 4096, 768, 256), ("large/xl out", 4096, 256, 256)]
for name, M, Nn, K in shapes:
    res = []
    for variant in ("mm", "ln+linear", "addmm residual"):
        x = torch.randn(M, K, device=dev); w = torch.randn(Nn, K, device=dev) * 0.05; r = torch.randn(M, Nn, device=dev)
        ln = torch.nn.LayerNorm(K).to(dev)
        if variant == "mm": f = lambda: torch.nn.functional.linear(x, w)
        elif variant == "ln+linear": f = lambda: torch.nn.functional.linear(ln(x), w)
        else: f = lambda: torch.addmm(r, x, w.t())
        for _ in range(3): f()
        torch.cuda.synchronize()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(20): f()
        torch.cuda.synchronize()
        ts = []
        for rep in range(7):
            e0 = torch.cuda.Event(enable_timing=True); e1 = torch.cuda.Event(enable_timing=True)
            e0.record(); 
            for _ in range(10): g.replay()
            e1.record(); torch.cuda.synchronize(); ts.append(e0.elapsed_time(e1) * 1000 / 200)
        ts.sort(); res.append(f"{variant} {ts[3]:.2f}")
    floor = 2 * M * Nn * K / 67e12 * 1e6
    print(f"{name:14s} M={M} N={Nn} K={K}  FFMA floor {floor:.1f} us  | " + " | ".join(res) + " us", flush=True)
print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())
from torch.profiler import profile, ProfilerActivity
for name, M, Nn, K in shapes:
    x = torch.randn(M, K, device=dev); w = torch.randn(Nn, K, device=dev)
    for _ in range(3): torch.nn.functional.linear(x, w)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(10): torch.nn.functional.linear(x, w)
        torch.cuda.synchronize()
    for ev in p.key_averages():
        if ev.device_type == torch.autograd.DeviceType.CUDA or "gemm" in ev.key.lower():
            t = getattr(ev, "device_time", None) or getattr(ev, "cuda_time", 0)
            print(f"  {name}: {ev.key[:110]}  {t:.2f} us avg", flush=True)
