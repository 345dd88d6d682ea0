"""One decode step of attention over a ragged KV cache, for `stepc from-torch`.

    stepc from-torch examples/torch/decode_attention.py:DecodeAttention \\
        --input q=bf16[64,8,64] --input k_new=bf16[64,64] --input v_new=bf16[64,64] \\
        --input k_cache=bf16[64,6464,64] --input v_cache=bf16[64,6464,64] \\
        --input kv_lens=i64[64] --schedule dynamic -o attention_from_torch.step

B requests, each one GQA group: QPK query heads sharing one KV head of HEAD_DIM. Request
b has kv_lens[b] cached rows in its slot of the cache; its new key/value row goes in at row
kv_lens[b], and its queries attend over the kv_lens[b] + 1 rows with the paper's simplified
softmax (no max subtraction, no scale: fold a 1/sqrt(HEAD_DIM) scale into q):

    out = (sum_j exp(q k_j^T) v_j) / (sum_j exp(q k_j^T))

The forward pass masks the whole cache (what `torch.export` captures without data-dependent
shapes); `stepc from-torch` lowers it to the paper's attention programs, which read only
each request's ceil((len + 1) / TILE_N) KV tiles.
"""

import torch
from torch import nn


class DecodeAttention(nn.Module):
    """Decode attention of B requests over a KV cache with per-request lengths."""

    def forward(self, q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor,
                k_cache: torch.Tensor, v_cache: torch.Tensor,
                kv_lens: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(k_cache.shape[1], device=k_cache.device)       # [MAXN]
        at_new = (pos[None, :] == kv_lens[:, None])[:, :, None]            # [B, MAXN, 1]
        k = torch.where(at_new, k_new[:, None, :], k_cache)                # append the new row
        v = torch.where(at_new, v_new[:, None, :], v_cache)
        valid = (pos[None, :] <= kv_lens[:, None])[:, None, :]             # [B, 1, MAXN]
        scores = torch.einsum("bhd,bnd->bhn", q, k)                        # [B, QPK, MAXN]
        e = torch.exp(scores.float()) * valid
        num = torch.einsum("bhn,bnd->bhd", e, v.float())                   # [B, QPK, HEAD_DIM]
        return (num / e.sum(dim=-1, keepdim=True)).to(q.dtype)
