"""Dense blocks for `stepc from-torch`: a SwiGLU MLP with RMSNorm, and a GELU MLP with a
softmax head.

    stepc from-torch examples/torch/swiglu_mlp.py:SwiGLUMLP --input x=f32[64,256]
    stepc from-torch examples/torch/swiglu_mlp.py:GeluMLP --input x=bf16[32,128]
"""

import torch
import torch.nn.functional as F
from torch import nn


class SwiGLUMLP(nn.Module):
    """y = down(silu(gate(norm(x))) * up(norm(x))): the paper's SwiGLU workload, pre-normed."""

    def __init__(self, hidden: int = 256, intermediate: int = 512, dtype=torch.float32):
        super().__init__()
        self.norm = nn.RMSNorm(hidden, eps=1e-6, dtype=dtype)
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False, dtype=dtype)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False, dtype=dtype)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        return self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class GeluMLP(nn.Module):
    """softmax(fc2(gelu(fc1(x))) + x): linear layers with bias, GELU, a residual add."""

    def __init__(self, hidden: int = 128, intermediate: int = 256, dtype=torch.float32):
        super().__init__()
        self.fc1 = nn.Linear(hidden, intermediate, dtype=dtype)
        self.fc2 = nn.Linear(intermediate, hidden, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.fc2(F.gelu(self.fc1(x))) + x, dim=-1)
