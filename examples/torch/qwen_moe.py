"""A Qwen3-style Mixture-of-Experts block (top-k routed SwiGLU experts) for `stepc from-torch`.

    stepc from-torch examples/torch/qwen_moe.py:MoEBlock --input x=bf16[64,2048] \\
        --schedule dynamic -o moe_from_torch.step

The forward pass is written densely (every expert sees every token, weighted by a routing
matrix that is zero outside each token's top-k), which is what `torch.export` captures
without data-dependent shapes; `stepc from-torch` lowers it to the routed form (Partition
by the top-k selector, one SwiGLU per expert, Reassemble + Accum).
"""

import torch
import torch.nn.functional as F
from torch import nn


class MoEBlock(nn.Module):
    """Router -> top-k -> SwiGLU experts -> weighted combine; Qwen3-30B-A3B sizes by default."""

    def __init__(self, hidden: int = 2048, intermediate: int = 768, experts: int = 128,
                 top_k: int = 8, dtype: torch.dtype = torch.bfloat16, device=None):
        super().__init__()
        self.top_k = top_k
        kw = {"dtype": dtype, "device": device}
        self.gate = nn.Linear(hidden, experts, bias=False, **kw)
        self.gate_proj = nn.Parameter(torch.empty(experts, hidden, intermediate, **kw))
        self.up_proj = nn.Parameter(torch.empty(experts, hidden, intermediate, **kw))
        self.down_proj = nn.Parameter(torch.empty(experts, intermediate, hidden, **kw))
        if device is None or torch.device(device).type != "meta":
            for p in (self.gate_proj, self.up_proj, self.down_proj):
                nn.init.normal_(p, std=hidden ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = F.softmax(self.gate(x), dim=-1, dtype=torch.float32)
        weights, ids = torch.topk(probs, self.top_k, dim=-1)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(x.dtype)
        route = torch.zeros_like(probs, dtype=x.dtype).scatter(1, ids, weights)   # [B, E]
        gate = torch.einsum("bd,edf->ebf", x, self.gate_proj)
        up = torch.einsum("bd,edf->ebf", x, self.up_proj)
        out = torch.einsum("ebf,efd->ebd", F.silu(gate) * up, self.down_proj)
        return torch.einsum("ebd,be->bd", out, route)
