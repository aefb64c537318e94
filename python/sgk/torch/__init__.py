"""sgk for PyTorch: a drop-in RelationUpdate module whose forward runs sgk.

    import sgk.torch
    layer = sgk.torch.RelationUpdate(dim, pair_dim, num_heads).cuda()
    layer.load_state_dict(trained.state_dict())      # the reference module's names
    out = layer(nodes, pair_feats, edge_mask)        # CUDA tensors: the cuda backend

sgk.torch.reference is the pure-PyTorch module that defines what the layer
computes; RelationUpdate has its parameter names, so state dicts move
between the two unchanged. The forward is the custom operator
torch.ops.sgk.relation_update (sgk.torch.relation_update), with a fake
implementation, so torch.compile(fullgraph=True) and CUDA-graph capture
work; while autograd records, torch.ops.sgk.relation_update_train, which
also returns the softmax statistics sgk's backward reads.
"""
from . import reference
from .module import RelationUpdate, relation_update, relation_update_train

__all__ = ["RelationUpdate", "relation_update", "relation_update_train", "reference"]
