"""Data-parallel training of a small model built on sgk.torch.RelationUpdate,
under PyTorch's DistributedDataParallel: each rank computes its share of the
global batch with sgk (forward and backward), DDP averages the gradients.

    torchrun --nproc_per_node 2 python/examples/ddp_train.py --device cuda   # NCCL, a GPU a rank
    torchrun --nproc_per_node 2 python/examples/ddp_train.py --device cpu    # gloo
    python3 python/examples/ddp_train.py --device cpu                         # one process

Every run of the same arguments sees the same global batch and the same
initial weights, whatever the number of ranks, so the losses and the final
weights of a run on several ranks are those of one process on the whole
batch, up to the order of the sums (--json writes them, from rank 0).
"""
import argparse
import json
import os

import torch
import torch.distributed as dist

import sgk.torch as st


class Model(torch.nn.Module):
    """A relation update over the scene graph, then a linear read-out per node."""

    def __init__(self, dim, pair_dim, heads):
        super().__init__()
        self.rel = st.RelationUpdate(dim, pair_dim, heads)
        self.head = torch.nn.Linear(dim, 1)

    def forward(self, nodes, pair, mask):
        return self.head(self.rel(nodes, pair, mask)).squeeze(-1)


def global_batch(step, B, N, D, P, seed):
    """The step's whole batch, the same in every process."""
    g = torch.Generator().manual_seed(seed * 1000 + step)
    nodes = torch.randn(B, N, D, generator=g)
    pair = torch.randn(B, N, N, P, generator=g)
    mask = torch.rand(B, N, N, generator=g) < 0.6
    mask[:, torch.arange(N), torch.arange(N)] = True
    target = torch.randn(B, N, generator=g)
    return nodes, pair, mask, target


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8, help="global batch (a multiple of the ranks)")
    ap.add_argument("--shape", default="12,32,4,4", help="N,D,P,H")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="rank 0 writes the losses and final weights here")
    a = ap.parse_args()
    N, D, P, H = (int(x) for x in a.shape.split(","))

    distributed = "WORLD_SIZE" in os.environ
    rank, world = 0, 1
    if distributed:
        if a.device == "cuda":
            os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off
        dist.init_process_group("nccl" if a.device == "cuda" else "gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    if a.batch % world:
        raise SystemExit(f"--batch {a.batch} is not a multiple of the {world} ranks")
    if a.device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")

    torch.manual_seed(a.seed)  # the same initial weights on every rank
    model = Model(D, P, H).to(device)
    net = torch.nn.parallel.DistributedDataParallel(model) if distributed else model
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    share = a.batch // world
    losses = []
    for step in range(a.steps):
        nodes, pair, mask, target = (t[rank * share:(rank + 1) * share].to(device)
                                     for t in global_batch(step, a.batch, N, D, P, a.seed))
        opt.zero_grad()
        # each rank's mean over its share; DDP averages the gradients over the
        # ranks, which is the gradient of the mean over the whole batch
        loss = torch.nn.functional.mse_loss(net(nodes, pair, mask), target)
        loss.backward()
        opt.step()
        total = loss.detach().clone()
        if distributed:
            dist.all_reduce(total)
        losses.append(total.item() / world)
        if rank == 0:
            print(f"step {step}: loss {losses[-1]:.6f} ({world} rank{'s' if world > 1 else ''}, {device})")
    if rank == 0 and a.json:
        weights = {k: v.detach().cpu().flatten().tolist() for k, v in model.state_dict().items()}
        with open(a.json, "w") as f:
            json.dump({"world": world, "losses": losses, "weights": weights}, f)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
