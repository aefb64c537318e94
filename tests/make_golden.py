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

The backward cases are all in backward.bin: the magic b"SGKBWD01", the
number of cases (i64), then per case a header (name, 32 bytes NUL-padded;
B N D H P as i64; mask type as i64, 0 f32 and 1 u8; eps f64), the inputs and
weights as above, d_out (B,N,D) f32, then in f64: the output (B,N,D), the
softmax statistics row_max and row_sum (B,H,N) (over the edges j of row
(b,h,i): the largest score, and the sum of exp(score - row_max); -inf and 0
for a row without edges), and autograd's gradients of sum(d_out * out) for
nodes, pair_feats and the ten weights, in the order and shapes above.
"""
import argparse
import importlib.util
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

# name, B, N, D, H, P, mask kind
CASES = [
    ("masked_row", 2, 5, 8, 2, 3, "random_one_empty_row"),
    ("dense", 1, 7, 12, 3, 4, "dense"),
    ("u8_mask", 3, 4, 16, 4, 5, "random_u8"),
    ("odd_values", 2, 9, 32, 4, 6, "odd_values"),
    ("head_dim_1", 2, 6, 4, 4, 2, "random"),
]

# the same for backward.bin
BACKWARD_CASES = [
    ("bwd_masked_row", 2, 5, 8, 2, 3, "random_one_empty_row"),
    ("bwd_u8_mask", 2, 4, 12, 3, 4, "random_u8"),
    ("bwd_odd_values", 1, 6, 16, 4, 5, "odd_values"),
    ("bwd_head_dim_1", 2, 3, 4, 4, 2, "random"),
]

WEIGHTS = ("norm.weight", "norm.bias", "q_proj.weight", "k_proj.weight", "v_proj.weight",
           "out_proj.weight", "rel_mlp.0.weight", "rel_mlp.0.bias", "rel_mlp.2.weight",
           "rel_mlp.2.bias")


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


def f32(t):
    return t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()


def f64(t):
    return t.detach().to(torch.float64).contiguous().numpy().astype("<f8").tobytes()


def draw_case(Model, B, N, D, H, P, kind, seed):
    """A module with drawn weights, float32 inputs and the mask of one case."""
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
    return model, g, nodes, pair, mask_stored, mask_f, mask_type


def input_bytes(model, nodes, pair, mask_stored, mask_type):
    sd = model.state_dict()
    parts = [f32(nodes), f32(pair)]
    if mask_type == "u8":
        parts.append(mask_stored.contiguous().numpy().astype("u1").tobytes())
    else:
        parts.append(f32(mask_stored))
    return parts + [f32(sd[key]) for key in WEIGHTS]


def write_case(Model, out_dir, name, B, N, D, H, P, kind, seed):
    model, _, nodes, pair, mask_stored, mask_f, mask_type = draw_case(
        Model, B, N, D, H, P, kind, seed)
    parts = input_bytes(model, nodes, pair, mask_stored, mask_type)
    model64 = model.double()
    with torch.no_grad():
        out = model64(nodes.double(), pair.double(), mask_f.double())
    assert torch.isfinite(out).all(), name
    parts.append(f64(out))
    fname = name + ".bin"
    with open(os.path.join(out_dir, fname), "wb") as f:
        f.write(b"".join(parts))
    eps = model.norm.eps
    return f"{name} {B} {N} {D} {H} {P} {mask_type} {eps:g} {fname}\n"


def softmax_stats(model64, nodes, pair, edge_mask, H):
    """row_max, row_sum (B,H,N) of the scores, from the weights alone (the
    module keeps no statistics), and the output they give."""
    sd = {k: v.double() for k, v in model64.state_dict().items()}
    B, N, D = nodes.shape
    hd = D // H
    x = F.layer_norm(nodes, (D,), sd["norm.weight"], sd["norm.bias"], model64.norm.eps)
    split = lambda t: t.view(B, N, H, hd).transpose(1, 2)
    q, k, v = (split(F.linear(x, sd[n + "_proj.weight"])) for n in ("q", "k", "v"))
    bias = F.linear(F.silu(F.linear(pair, sd["rel_mlp.0.weight"], sd["rel_mlp.0.bias"])),
                    sd["rel_mlp.2.weight"], sd["rel_mlp.2.bias"]).permute(0, 3, 1, 2)
    edge = (edge_mask != 0).unsqueeze(1).expand(B, H, N, N)
    s = (q @ k.transpose(-1, -2) / math.sqrt(hd) + bias).masked_fill(~edge, float("-inf"))
    has = edge.any(-1)
    row_max = torch.where(has, s.amax(-1), torch.full((), float("-inf"), dtype=s.dtype))
    e = torch.where(edge, torch.exp(s - torch.where(has, row_max, 0.0).unsqueeze(-1)), 0.0)
    row_sum = e.sum(-1)
    attn = torch.where(has.unsqueeze(-1), e / torch.where(has, row_sum, 1.0).unsqueeze(-1), 0.0)
    ctx = (attn @ v).transpose(1, 2).reshape(B, N, D)
    return row_max, row_sum, nodes + F.linear(ctx, sd["out_proj.weight"])


def backward_case(Model, name, B, N, D, H, P, kind, seed):
    """One case of backward.bin, as bytes."""
    model, g, nodes, pair, mask_stored, mask_f, mask_type = draw_case(
        Model, B, N, D, H, P, kind, seed)
    parts = input_bytes(model, nodes, pair, mask_stored, mask_type)
    d_out = torch.randn(B, N, D, generator=g)
    model64 = model.double()
    nodes64 = nodes.double().requires_grad_()
    pair64 = pair.double().requires_grad_()
    out = model64(nodes64, pair64, mask_f.double())
    assert torch.isfinite(out).all(), name
    out.backward(d_out.double())
    with torch.no_grad():
        row_max, row_sum, out_again = softmax_stats(model64, nodes64, pair64, mask_f.double(), H)
    # the statistics are those of the module's own softmax
    assert torch.allclose(out_again, out, rtol=0, atol=1e-12), name
    params = dict(model64.named_parameters())
    parts += [f32(d_out), f64(out), f64(row_max), f64(row_sum), f64(nodes64.grad), f64(pair64.grad)]
    parts += [f64(params[key].grad) for key in WEIGHTS]
    header = name.encode("ascii").ljust(32, b"\0")
    header += struct.pack("<6qd", B, N, D, H, P, 1 if mask_type == "u8" else 0, model.norm.eps)
    return header + b"".join(parts)


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
    blob = [b"SGKBWD01", struct.pack("<q", len(BACKWARD_CASES))]
    for idx, (name, B, N, D, H, P, kind) in enumerate(BACKWARD_CASES):
        blob.append(backward_case(Model, name, B, N, D, H, P, kind, 2000 + idx))
    with open(os.path.join(args.out, "backward.bin"), "wb") as f:
        f.write(b"".join(blob))
    print("wrote %d cases and %d backward cases to %s"
          % (len(CASES), len(BACKWARD_CASES), args.out), file=sys.stderr)


if __name__ == "__main__":
    main()
