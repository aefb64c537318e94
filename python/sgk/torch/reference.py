"""The relation-update layer of SPEC section 1 as a PyTorch module.

This is the module that sgk's golden cases (tests/make_golden.py) and its
benchmarks (bench/torch_compare.py) compare against. Its parameters carry
the names of the design card's module (norm, q_proj, k_proj, v_proj,
rel_mlp.0, rel_mlp.2, out_proj), so a state dict moves between the two, and
between this module and sgk's layer descriptor, without renaming or
transposes (nn.Linear keeps weight[out][in], as sgk does).

    x      = LayerNorm(nodes)
    q,k,v  = x Wq^T, x Wk^T, x Wv^T              split into H heads of D/H
    bias   = rel_mlp(pair_feats)                 Linear(P,P), SiLU, Linear(P,H)
    s      = q k^T / sqrt(D/H) + bias, -inf where edge_mask == 0
    a      = softmax(s); a row with no edge is all zeros
    out    = nodes + (a v) Wo^T

Scripts load this file by path (importlib.util.spec_from_file_location), so
using it needs torch and nothing installed from sgk.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class RelationUpdate(nn.Module):
    """RelationUpdate(dim, pair_dim, num_heads): forward(nodes (B,N,D),
    pair_feats (B,N,N,P), edge_mask (B,N,N)) -> (B,N,D)."""

    def __init__(self, dim: int, pair_dim: int, num_heads: int):
        super().__init__()
        if dim % num_heads != 0:
            raise ValueError(f"num_heads ({num_heads}) must divide dim ({dim})")
        self.dim, self.pair_dim, self.num_heads = dim, pair_dim, num_heads
        self.head_dim = dim // num_heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        # Built in this order so that one torch seed gives the same weights as
        # the design card's module: the golden cases depend on it.
        self.norm = nn.LayerNorm(dim)
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.rel_mlp = nn.Sequential(nn.Linear(pair_dim, pair_dim), nn.SiLU(), nn.Linear(pair_dim, num_heads))
        self.out_proj = nn.Linear(dim, dim, bias=False)

    def heads(self, nodes):
        """q, k, v of LayerNorm(nodes), each (B, H, N, hd)."""
        B, N, _ = nodes.shape
        x = self.norm(nodes)
        split = lambda t: t.view(B, N, self.num_heads, self.head_dim).transpose(1, 2)
        return split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))

    def pair_bias(self, pair_feats):
        """The relation MLP's bias, (B, H, N, N)."""
        return self.rel_mlp(pair_feats).permute(0, 3, 1, 2)

    def finish(self, nodes, ctx):
        """Residual and output projection of ctx (B, H, N, hd)."""
        B, N, D = nodes.shape
        return nodes + self.out_proj(ctx.transpose(1, 2).reshape(B, N, D))

    def forward(self, nodes, pair_feats, edge_mask):
        q, k, v = self.heads(nodes)
        edge = (edge_mask != 0).unsqueeze(1)  # (B, 1, N, N)
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale + self.pair_bias(pair_feats)
        scores = scores.masked_fill(~edge, float("-inf"))
        # softmax of a row of -inf is NaN: such a row (no edge) gets zero
        # attention. torch.where picks per row, so a NaN that an input put
        # into a row with edges still comes through (nan_to_num would hide it).
        attn = torch.where(edge.any(-1, keepdim=True), torch.softmax(scores, dim=-1),
                           torch.zeros((), dtype=scores.dtype, device=scores.device))
        return self.finish(nodes, torch.matmul(attn, v))


class RelationUpdateSDPA(RelationUpdate):
    """The same layer through F.scaled_dot_product_attention, the relation
    bias (-inf where there is no edge) passed as its attn_mask. One
    difference: a row with no edge comes out NaN here, where RelationUpdate
    gives zero attention; the benchmarks' inputs give every node its self
    edge."""

    def forward(self, nodes, pair_feats, edge_mask):
        q, k, v = self.heads(nodes)
        bias = self.pair_bias(pair_feats).masked_fill((edge_mask == 0).unsqueeze(1), float("-inf"))
        return self.finish(nodes, F.scaled_dot_product_attention(q, k, v, attn_mask=bias))


# The design card's name for the module (shared/anchors/model_ref.py).
Model = RelationUpdate
ModelSDPA = RelationUpdateSDPA
