"""Attention as transformers writes it (the `hf-decode-attention` family's classes) in
prefill: S new tokens per request under a causal mask, the second schedule of the decode
lowering (stepc.torch.hf_attention). The example inputs choose: `hidden_states` `[B, 1,
hidden]` is a decode step, `[B, S, hidden]` with S > 1 a prefill.

The forward is `module(hidden_states, position_embeddings, attention_mask, cache)`:

- `hidden_states` `[B, S, hidden]`;
- `position_embeddings` `(cos, sin)`, each `[B, S, head_dim]` (each new token's position);
- `attention_mask` `[B, 1, S, P + S]`, bool or additive as transformers builds it: over the
  P cached positions the same for every new token (padding on either side, holes), over the
  S new ones causal (token i attends the new tokens <= i); None is refused (eager attention
  would attend to every new token, SDPA causally);
- `cache` a `DynamicCache` whose layer `layer_idx` holds `[B, KV, P, head_dim]`.

Request b's KV length is the number of cached positions its mask attends to (the external
stream `kv_lens`). `values` gathers those rows to the front of the request's cache slot,
where the program reads them in ceil((len + 1) / TILE_N) tiles (`MASK` masks the rows past
len, as in decode) and appends the S new rows after them; the scores over the new rows take
the causal mask `CAUSAL`. Any S: the new rows are one `[S, HEAD_DIM]` tile, not KV tiles.
Read the values and traces before calling the module: its forward appends.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from stepc.torch.attention import coarse_regions
from stepc.torch.capture import InputRefused
from stepc.torch.hf_attention import (
    HFAttentionIO,
    _np,
    _rotary,
    lower_hf_attention,
    schedule_params,
)
from stepc.torch.hf_attention_program import layer_kv
from stepc.torch.hf_prefill_program import (
    HFPrefillShapes,
    check_mask,
    declare_prefill,
    prefill_body,
    refuse_prefill,
)

# A masked score: finite, so that a tile whose rows are all masked (the cached part of a
# request with no cached rows) has a finite row max and weighs exp(MASKED - max) = 0; half
# the f32 minimum, so that it stays finite rounded to bf16 and added to a score.
MASKED = float(np.finfo(np.float32).min) / 2


def new_tokens(example_inputs: tuple) -> int:
    """S of `hidden_states` `[B, S, hidden]` (1 for anything else: decode refuses it)."""
    hs = example_inputs[0] if example_inputs else None
    return int(hs.shape[1]) if isinstance(hs, torch.Tensor) and hs.dim() == 3 else 1


def lower_hf_decode_or_prefill(module, example_inputs: tuple, tiling: str, sched: dict):
    """Decode attention for one new token per request, prefill for S > 1."""
    if new_tokens(tuple(example_inputs)) > 1:
        return lower_hf_prefill(module, example_inputs, tiling, sched)
    return lower_hf_attention(module, example_inputs, tiling, sched)


def lower_hf_prefill(module, example_inputs: tuple, tiling: str, sched: dict):
    """Lower a transformers attention in prefill under `tiling` (the decode schedules'
    params R, TILE_N, BW, NB and WEIGHTS_ON_CHIP)."""
    from stepc.torch.lowering import TorchProgram
    s = HFPrefillShapes(module, tuple(example_inputs))
    # the KV slot holds the cached rows and the new ones
    params = schedule_params(tiling, sched, s.batch, s.past + s.new, "prefill")
    w, weights, tensors = declare_prefill(module, s, tiling, params)
    body = prefill_body(s, tiling, params["WEIGHTS_ON_CHIP"] == 1)
    w.graph(body)
    io = HFPrefillIO(s, tiling, params, weights)
    return TorchProgram(w.render(), tensors, module, {"tiling": tiling, **params}, io=io)


class HFPrefillIO(HFAttentionIO):
    """The forward arguments' program values, `kv_lens` trace and seeded examples."""

    def _attended(self, module, args: tuple) -> np.ndarray:
        """Each request's attended cached positions [B, P]; refuses a mask that is not the
        same over the cache for every new token, or not causal over the new ones."""
        s, n, mask = self.s, self.s.new, args[2] if len(args) > 2 else None
        if mask is None:  # eager attends to every new token, SDPA causally
            raise refuse_prefill(module, "prefill without an attention_mask is not lowered "
                                         "(pass the causal mask transformers builds)")
        check_mask(module, s, mask)
        m = mask[:, 0].detach().cpu()
        attend = m.numpy() if m.dtype == torch.bool else (
            m.float() > torch.finfo(m.dtype).min / 2).numpy()
        cached, new = attend[:, :, :s.past], attend[:, :, s.past:]
        if (cached != cached[:, :1]).any():
            b = int(np.flatnonzero((cached != cached[:, :1]).any(axis=(1, 2)))[0])
            raise refuse_prefill(module, f"the attention mask of request {b} attends different "
                                         "cached positions from different new tokens (a "
                                         "sliding window across the new tokens is not lowered)")
        causal = np.tril(np.ones((n, n), dtype=bool))
        if (new != causal).any():
            b = int(np.flatnonzero((new != causal).any(axis=(1, 2)))[0])
            raise refuse_prefill(module, f"the attention mask of request {b} is not causal over "
                                         "its new tokens (token i attends the new tokens <= i)")
        return cached[:, 0]

    def values(self, module, args: tuple) -> dict[str, np.ndarray]:
        s, p, n = self.s, self.params, self.s.new
        if tuple(args[0].shape) != (s.batch, n, s.hidden):
            raise refuse_prefill(module, f"hidden_states is {list(args[0].shape)}; the program "
                                         f"was lowered for [{s.batch}, {n}, {s.hidden}]")
        attend = self._attended(module, args)
        keys, vals = (_np(t) for t in layer_kv(args[3], module))
        if keys.shape != (s.batch, s.kv_heads, s.past, s.head_dim):
            raise refuse_prefill(module, f"the cache's keys are {list(keys.shape)}, expected "
                                         f"[{s.batch}, {s.kv_heads}, {s.past}, {s.head_dim}]")
        maxn, tn = p["MAXN"], p["TILE_N"]
        kc = np.zeros((s.batch, s.kv_heads, maxn, s.head_dim), np.float32)
        vc = np.zeros_like(kc)
        mask = np.full((s.batch, s.kv_heads, maxn), MASKED, np.float32)
        for b in range(s.batch):
            rows = np.flatnonzero(attend[b])
            kc[b, :, :len(rows)] = keys[b][:, rows]
            vc[b, :, :len(rows)] = vals[b][:, rows]
            mask[b, :, :len(rows)] = 0.0
        causal = np.where(np.tril(np.ones((n, n), dtype=bool)), 0.0, MASKED)
        cos, sin = self._rope_tables(module, args[1])
        state = module.state_dict()
        out = {"K_CACHE": kc.reshape(-1, s.head_dim), "V_CACHE": vc.reshape(-1, s.head_dim),
               "MASK": mask.reshape(-1, tn), "ROT": s.form.rope.rot,
               "CAUSAL": np.tile(causal, (s.qpk, 1)).astype(np.float32),
               "SCALE": np.full((1, 1), s.scaling, np.float32)}
        rows = {"X": _np(args[0]), "COS": cos, "SIN": sin}
        for name, a in rows.items():
            a = coarse_regions(a, self.params) if self.tiling == "coarse" else a
            out[name] = a.reshape(*a.shape[:-3], -1, a.shape[-1])
        for name, src in self.weights.items():
            w = src.take(state)
            out[name] = w.reshape(1, -1) if w.ndim == 1 else w
        return out

    def _rope_tables(self, module, pe) -> tuple[np.ndarray, np.ndarray]:
        """COS and SIN [B, S, head_dim]: the module's rotary embedding of the given cos and
        sin (each [B, S, rotary dims])."""
        s, n = self.s, self.s.new
        cos, sin = HFPrefillShapes.rope_args(pe, module)
        want = (s.batch, n, s.rotary_dim)
        if any(tuple(t.shape) != want for t in (cos, sin)):
            raise refuse_prefill(module, f"position_embeddings (cos, sin) are "
                                         f"{list(cos.shape)} and {list(sin.shape)}; the program "
                                         f"was lowered for {list(want)} each")
        cos, sin = s.form.rope.tables(cos.reshape(-1, 1, s.rotary_dim),
                                      sin.reshape(-1, 1, s.rotary_dim))
        return cos.reshape(s.batch, n, -1), sin.reshape(s.batch, n, -1)

    def expected(self, module, args: tuple) -> dict[str, np.ndarray]:
        """The outputs O (the forward's attention output, [B S, hidden]) and K_NEW, V_NEW
        (the S key and value rows it appends to a copy of the cache)."""
        s, n = self.s, self.s.new
        cache = copy.deepcopy(args[3])
        with torch.no_grad():
            out = module(args[0], args[1], args[2], cache)[0]
        keys, vals = layer_kv(cache, module)
        return {"O": _np(out).reshape(-1, s.hidden),
                "K_NEW": _np(keys[:, :, -n:]).reshape(-1, s.head_dim),
                "V_NEW": _np(vals[:, :, -n:]).reshape(-1, s.head_dim)}

    def seeded_inputs(self, module, example: tuple, seed: int) -> tuple:
        """hidden_states, (cos, sin) at each new token's position, an additive mask of
        seeded KV lengths up to P (right padding) and causal over the new tokens, a
        DynamicCache of normal floats."""
        from transformers.cache_utils import DynamicCache
        s, n = self.s, self.s.new
        g = torch.Generator().manual_seed(seed)
        dt = {"f32": torch.float32, "bf16": torch.bfloat16}[s.dtype]
        lens = torch.randint(0, s.past + 1, (s.batch,), generator=g)
        hs = torch.randn(s.batch, n, s.hidden, generator=g).to(dt)
        pe = _rotary(module, hs, lens[:, None] + torch.arange(n)[None])
        if pe[0].shape[-1] != s.rotary_dim:
            raise refuse_prefill(module, f"the model's rotary embedding covers "
                                         f"{pe[0].shape[-1]} dims of a head, the example "
                                         f"position_embeddings {s.rotary_dim}: give them as "
                                         f"[B, {n}, {pe[0].shape[-1]}] each (stacked: [2, B, "
                                         f"{n}, {pe[0].shape[-1]}])", InputRefused)
        mask = prefill_mask(lens, s.past, n, dt)
        cache = DynamicCache()
        shape = (s.batch, s.kv_heads, s.past, s.head_dim)
        for layer in range(module.layer_idx + 1):
            cache.update(torch.randn(shape, generator=g).to(dt),
                         torch.randn(shape, generator=g).to(dt), layer)
        return hs, pe, mask, cache


def prefill_mask(lens: torch.Tensor, past: int, new: int, dtype: torch.dtype) -> torch.Tensor:
    """The additive mask `[B, 1, new, past + new]` of right-padded KV lengths `lens`, causal
    over the new tokens (as transformers builds it for eager and SDPA)."""
    cached = torch.arange(past)[None, None] < lens[:, None, None]
    causal = torch.ones(new, new, dtype=torch.bool).tril()[None]
    valid = torch.cat([cached.expand(-1, new, -1), causal.expand(len(lens), -1, -1)], dim=-1)
    add = torch.zeros(valid.shape, dtype=dtype).masked_fill(~valid, torch.finfo(dtype).min)
    return add[:, None]
