#!/usr/bin/env python3
"""Writes the golden cases in tests/data/ from the PyTorch module.

Usage: make_golden.py [--model PATH/TO/module.py] [--out tests/data]

The module is sgk's own python/sgk/torch/reference.py (class
RelationUpdate(dim, pair_dim, num_heads)), loaded by path; --model names
another file with the same class, or with the design card's name for it,
Model. Every case draws float32 inputs and weights, then runs the module in
float64 on exactly those values, so the expected output is the true result
for the stored inputs.

Each case is one little-endian file <name>.bin holding, in order:
nodes (B,N,D) f32, pair_feats (B,N,N,P) f32, edge_mask (B,N,N) f32 or u8,
ln_gamma, ln_beta (D) f32, wq, wk, wv, wo (D,D) f32, w1 (P,P), b1 (P),
w2 (H,P), b2 (H) f32, then the expected output (B,N,D) f64.
golden.txt lists one case per line: name B N D H P mask eps file.
"""
import argparse
import importlib.util
import os
import sys

import torch

# name, B, N, D, H, P, mask kind
CASES = [
    ("masked_row", 2, 5, 8, 2, 3, "random_one_empty_row"),
    ("dense", 1, 7, 12, 3, 4, "dense"),
    ("u8_mask", 3, 4, 16, 4, 5, "random_u8"),
    ("odd_values", 2, 9, 32, 4, 6, "odd_values"),
    ("head_dim_1", 2, 6, 4, 4, 2, "random"),
]


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE = os.path.join(REPO, "python", "sgk", "torch", "reference.py")


def load_model_class(path):
    spec = importlib.util.spec_from_file_location("sgk_golden_model", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, "RelationUpdate", None) or mod.Model


def make_mask(kind, B, N, g):
    """Returns (mask as stored, mask as float for the module, type name)."""
    if kind == "dense":
        m = torch.ones(B, N, N)
        return m, m, "f32"
    m = (torch.rand(B, N, N, generator=g) < 0.5).float()
    if kind == "random_one_empty_row":
        m[:, torch.arange(N), torch.arange(N)] = 1.0
        m[1, 2, :] = 0.0  # one fully masked row: attention must be all zeros
        return m, m, "f32"
    if kind == "random_u8":
        m[0, 0, :] = 0.0
        stored = (m * torch.randint(1, 256, (B, N, N), generator=g)).to(torch.uint8)
        return stored, (stored != 0).float(), "u8"
    if kind == "odd_values":
        values = torch.tensor([0.3, -2.0, float("nan"), float("inf"), 1e-30, 1.0])
        pick = torch.randint(0, len(values), (B, N, N), generator=g)
        stored = torch.where(m != 0, values[pick], torch.zeros(()))
        stored[0, 1, :] = 0.0
        return stored, stored, "f32"
    return m, m, "f32"


def write_case(Model, out_dir, name, B, N, D, H, P, kind, seed):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = Model(D, P, H)
    with torch.no_grad():
        # defaults are gamma=1, beta=0: draw them so a mix-up of the two shows
        model.norm.weight.copy_(torch.rand(D, generator=g) + 0.5)
        model.norm.bias.copy_(torch.rand(D, generator=g) - 0.5)
    nodes = torch.randn(B, N, D, generator=g)
    pair = torch.randn(B, N, N, P, generator=g)
    mask_stored, mask_f, mask_type = make_mask(kind, B, N, g)

    model64 = model.double()
    with torch.no_grad():
        out = model64(nodes.double(), pair.double(), mask_f.double())
    assert torch.isfinite(out).all(), name

    sd = model.state_dict()
    f32 = lambda t: t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
    parts = [f32(nodes), f32(pair)]
    if mask_type == "u8":
        parts.append(mask_stored.contiguous().numpy().astype("u1").tobytes())
    else:
        parts.append(f32(mask_stored))
    for key in ("norm.weight", "norm.bias", "q_proj.weight", "k_proj.weight", "v_proj.weight",
                "out_proj.weight", "rel_mlp.0.weight", "rel_mlp.0.bias", "rel_mlp.2.weight",
                "rel_mlp.2.bias"):
        parts.append(f32(sd[key]))
    parts.append(out.contiguous().numpy().astype("<f8").tobytes())
    fname = name + ".bin"
    with open(os.path.join(out_dir, fname), "wb") as f:
        f.write(b"".join(parts))
    eps = model.norm.eps
    return f"{name} {B} {N} {D} {H} {P} {mask_type} {eps:g} {fname}\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=REFERENCE,
                    help="the module file (default: python/sgk/torch/reference.py)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
    args = ap.parse_args()
    Model = load_model_class(args.model)
    os.makedirs(args.out, exist_ok=True)
    lines = ["# name B N D H P mask eps file (written by make_golden.py, torch %s)\n"
             % torch.__version__]
    for idx, (name, B, N, D, H, P, kind) in enumerate(CASES):
        lines.append(write_case(Model, args.out, name, B, N, D, H, P, kind, 1000 + idx))
    with open(os.path.join(args.out, "golden.txt"), "w") as f:
        f.writelines(lines)
    print("wrote %d cases to %s" % (len(CASES), args.out), file=sys.stderr)


if __name__ == "__main__":
    main()
