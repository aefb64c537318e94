"""LayerNorm's row statistics in float32, as the CUDA kernels order them,
against a float64 reference: relative L2 error of the normalized row
(x - mean) * rstd for rows of 96 values (the seed preset's D), 3 a lane.

  two-pass  mean by a warp sum, then the centred squares (the runtime
            shapes, the generated kernels)
  merge     each lane's mean and centred squares, merged pairwise over the
            warp (fused-small's compiled-in shapes, 084cc34)
  shifted   the same after subtracting the row's first value from every
            value (every LayerNorm of sgk since the ln_offset test cases)

Where |mean| >> std the float32 mean's rounding reaches every normalized
value in the first two (1e-5 at mean 100, std 1; 1e-3 at mean 1e4); the
shift keeps the lanes' values near 0. Run: python3 ln_stats_sim.py
(numpy only)."""
import numpy as np

f = np.float32
LANES, PER = 32, 3


def lanes(x):
    return x.reshape(PER, LANES).T  # lane l holds x[l + 32 u]


def butterfly(v, op):
    o = 1
    while o < LANES:
        v = op(v, v[np.arange(LANES) ^ o])
        o <<= 1
    return v


def two_pass(x):
    v = lanes(x)
    s = butterfly(v.sum(axis=1, dtype=f), lambda a, b: (a + b).astype(f))
    mean = f(s[0] / f(x.size))
    t = (v - mean).astype(f)
    q = np.zeros(LANES, f)
    for u in range(PER):
        q = (t[:, u].astype(np.float64) * t[:, u] + q).astype(f)  # fmaf
    q = butterfly(q, lambda a, b: (a + b).astype(f))
    rstd = f(1 / np.sqrt(np.float64(f(q[0] / f(x.size)))))
    return (t * rstd).astype(f).T.reshape(-1)


def merge(x, shift=False):
    v = lanes(x).astype(f)
    if shift:
        v = (v - x[0]).astype(f)
    m = ((v[:, 0] + v[:, 1]).astype(f) + v[:, 2]).astype(f) * f(1 / PER)
    q = np.zeros(LANES, f)
    for u in range(PER):
        t = (v[:, u] - m).astype(f)
        q = (t.astype(np.float64) * t + q).astype(f)
    n, o = f(PER / 2), 1
    while o < LANES:
        idx = np.arange(LANES) ^ o
        d = (m[idx] - m).astype(f)
        q = ((d * d).astype(f).astype(np.float64) * n + (q + q[idx]).astype(f)).astype(f)
        m = (f(0.5) * (m + m[idx]).astype(f)).astype(f)
        n, o = n * 2, o << 1
    rstd = f(1 / np.sqrt(np.float64(q[0]) * np.float64(f(1 / x.size))))
    return ((v - m[0]).astype(f) * rstd).astype(f).T.reshape(-1)


def main():
    rng = np.random.default_rng(7)
    rows = {
        "N(0, 1)": lambda: rng.normal(0, 1, 96),
        "N(100, 1)": lambda: rng.normal(100, 1, 96),
        "N(1e4, 1)": lambda: rng.normal(1e4, 1, 96),
        "N(-3e3, 1e-2)": lambda: rng.normal(-3e3, 1e-2, 96),
        "N(0, 1), first value 1e4": lambda: np.concatenate([[1e4], rng.normal(0, 1, 95)]),
        "uniform 0 .. 1e3": lambda: rng.uniform(0, 1e3, 96),
    }
    methods = {"two-pass": two_pass, "merge": merge, "shifted": lambda x: merge(x, True)}
    print(f"{'rows (400 each)':28s}" + "".join(f"{m:>10s}" for m in methods))
    for name, gen in rows.items():
        worst = dict.fromkeys(methods, 0.0)
        for _ in range(400):
            x = gen().astype(f)
            x64 = x.astype(np.float64)
            ref = (x64 - x64.mean()) / np.sqrt(x64.var())
            for m, fn in methods.items():
                err = np.linalg.norm(fn(x).astype(np.float64) - ref) / np.linalg.norm(ref)
                worst[m] = max(worst[m], err)
        print(f"{name:28s}" + "".join(f"{worst[m]:10.1e}" for m in methods))


if __name__ == "__main__":
    main()
