"""Decode attention as transformers writes it (`LlamaAttention`, `Qwen3Attention`,
`Phi3Attention`, `Gemma2Attention`, ... and other classes by their parts, whose form
stepc/torch/hf_attention_forms.py reads), lowered whole from the module's config and weights
(a block family, stepc/torch/families.py).

The forward is `module(hidden_states, position_embeddings, attention_mask, cache)`, one new
token per request:

- `hidden_states` `[B, 1, hidden]`;
- `position_embeddings` `(cos, sin)`, each `[B, 1, head_dim]` or, partial rotary, `[B, 1,
  rotary dims]` (from the model's rotary embedding at each request's position);
- `attention_mask` `[B, 1, 1, P + 1]`, bool (True attends) or additive (0 attends, -inf or
  the dtype's minimum masks), as transformers builds it; None attends to every position;
- `cache` a `DynamicCache` whose layer `layer_idx` holds the requests' past keys and values
  padded to a common length P: `[B, KV, P, head_dim]`.

Ragged lengths: request b's KV length is the number of its P cached positions the mask
attends to (padding on either side, or holes); the new token's column P must be attended.
A sliding window is honoured through the mask (where transformers encodes it for eager and
SDPA). The lengths are the program's external stream `kv_lens`; `values` gathers each
request's attended rows to the front of its cache slot, where the program reads them, and
the mask in the program's layout (`MASK`, one row of TILE_N per KV tile) masks the rest. Read the
values and traces before calling the module: its forward appends to the cache.

The emitted program runs the paper's decode-attention schedules (programs/attention_*.step:
static interleaved, static coarse-grained blocks, dynamic dispatch over R regions). Each
region, per request: the q/k/v projections head by head (re-reading the weights per
request), the q/k RMS norms, RoPE (`x COS + (x ROT) SIN`, the tables and the signed
permutation as the module's rotary embedding makes them), the module's scale, then per KV
head the append of the new key/value row to the request's last KV tile (written back to the
cache) and the softmax (of the soft-capped scores where the module caps them) with the row
maximum subtracted over the request's KV tiles (the scores of one request are buffered on
chip between the max and the exponentials), and the o projection summed over the heads.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from stepc.torch.attention import ATTENTION_DEFAULTS, check_regions, coarse_regions
from stepc.torch.capture import InputRefused, LoweringError
from stepc.torch.emit import StepWriter
from stepc.torch.hf_attention_program import HFDecodeShapes, declare, layer_kv, program_body, refuse


class HFAttentionIO:
    """The forward arguments' program values, `kv_lens` trace and seeded examples."""

    def __init__(self, shapes: HFDecodeShapes, tiling: str, params: dict, weights: dict):
        self.s, self.tiling, self.params = shapes, tiling, params
        self.weights = weights  # program tensor -> its Slice of the state dict

    def kv_lens(self, module, args: tuple) -> np.ndarray:
        """Each request's attended cached positions (the mask's first P columns)."""
        attend = self._attended(module, args)
        return attend.sum(axis=1).astype(np.int64)

    def _attended(self, module, args: tuple) -> np.ndarray:
        s, mask = self.s, args[2] if len(args) > 2 else None
        if mask is None:
            return np.ones((s.batch, s.past), dtype=bool)
        if tuple(mask.shape) != (s.batch, 1, 1, s.past + 1):
            raise refuse(module, f"attention_mask is {list(mask.shape)}, expected "
                                  f"[{s.batch}, 1, 1, {s.past + 1}] (bool or additive)")
        m = mask[:, 0, 0].detach().cpu()
        attend = m.numpy() if m.dtype == torch.bool else (
            m.float() > torch.finfo(m.dtype).min / 2).numpy()
        if not attend[:, -1].all():
            raise refuse(module, "the attention mask hides a request's new token")
        return attend[:, :-1]

    def traces(self, module, args: tuple) -> dict[str, np.ndarray]:
        return {"kv_lens": self.kv_lens(module, args)}

    def values(self, module, args: tuple) -> dict[str, np.ndarray]:
        s, p = self.s, self.params
        if tuple(args[0].shape) != (s.batch, 1, s.hidden):
            raise refuse(module, f"hidden_states is {list(args[0].shape)}; the program was "
                                  f"lowered for [{s.batch}, 1, {s.hidden}]")
        attend = self._attended(module, args)
        lens = attend.sum(axis=1)
        keys, vals = (_np(t) for t in layer_kv(args[3], module))
        if keys.shape != (s.batch, s.kv_heads, s.past, s.head_dim):
            raise refuse(module, f"the cache's keys are {list(keys.shape)}, expected "
                                  f"[{s.batch}, {s.kv_heads}, {s.past}, {s.head_dim}]")
        maxn, tn = p["MAXN"], p["TILE_N"]
        kc = np.zeros((s.batch, s.kv_heads, maxn, s.head_dim), np.float32)
        vc = np.zeros_like(kc)
        mask = np.full((s.batch, s.kv_heads, maxn), -np.inf, np.float32)
        for b in range(s.batch):
            rows = np.flatnonzero(attend[b])
            kc[b, :, :len(rows)] = keys[b][:, rows]
            vc[b, :, :len(rows)] = vals[b][:, rows]
            mask[b, :, :lens[b] + 1] = 0.0  # the cached rows and the new one
        cos, sin = HFDecodeShapes.rope_args(args[1], module)
        if cos.shape[-1] != s.rotary_dim:
            raise refuse(module, f"position_embeddings cover {cos.shape[-1]} dims of a head; "
                                  f"the program was lowered for {s.rotary_dim}")
        cos, sin = s.form.rope.tables(cos.reshape(s.batch, 1, -1), sin.reshape(s.batch, 1, -1))
        state = module.state_dict()
        out = {"K_CACHE": kc.reshape(-1, s.head_dim), "V_CACHE": vc.reshape(-1, s.head_dim),
               "MASK": mask.reshape(-1, tn), "ROT": s.form.rope.rot,
               "SCALE": np.full((1, 1), s.scaling, np.float32)}
        rows = {"X": _np(args[0]).reshape(s.batch, s.hidden), "COS": cos, "SIN": sin}
        for name, a in rows.items():
            out[name] = coarse_regions(a, self.params) if self.tiling == "coarse" else a
        for name, src in self.weights.items():
            w = src.take(state)
            out[name] = w.reshape(1, -1) if w.ndim == 1 else w
        return out

    def expected(self, module, args: tuple) -> dict[str, np.ndarray]:
        """The outputs O (the forward's attention output) and K_NEW, V_NEW (the key and value
        rows it appends to a copy of the cache)."""
        s = self.s
        cache = copy.deepcopy(args[3])
        with torch.no_grad():
            out = module(args[0], args[1], args[2], cache)[0]
        keys, vals = layer_kv(cache, module)
        return {"O": _np(out).reshape(s.batch, s.hidden),
                "K_NEW": _np(keys[:, :, -1]).reshape(-1, s.head_dim),
                "V_NEW": _np(vals[:, :, -1]).reshape(-1, s.head_dim)}

    def seeded_inputs(self, module, example: tuple, seed: int) -> tuple:
        """hidden_states, (cos, sin) at each request's position, an additive mask of seeded
        KV lengths up to P (right padding), a DynamicCache of normal floats."""
        from transformers.cache_utils import DynamicCache
        s = self.s
        g = torch.Generator().manual_seed(seed)
        dt = {"f32": torch.float32, "bf16": torch.bfloat16}[s.dtype]
        lens = torch.randint(0, s.past + 1, (s.batch,), generator=g)
        hs = torch.randn(s.batch, 1, s.hidden, generator=g).to(dt)
        pe = _rotary(module, hs, lens[:, None])
        if pe[0].shape[-1] != s.rotary_dim:
            raise refuse(module, f"the model's rotary embedding covers {pe[0].shape[-1]} dims "
                                  f"of a head, the example position_embeddings {s.rotary_dim}: "
                                  f"give them as [B, 1, {pe[0].shape[-1]}] each (stacked: [2, "
                                  f"B, 1, {pe[0].shape[-1]}])", InputRefused)
        valid = torch.arange(s.past + 1)[None] < lens[:, None]
        valid[:, -1] = True
        mask = torch.zeros(valid.shape, dtype=dt).masked_fill(~valid, torch.finfo(dt).min)
        mask = mask[:, None, None, :]  # additive, as transformers builds it for eager and SDPA
        cache = DynamicCache()
        shape = (s.batch, s.kv_heads, s.past, s.head_dim)
        for layer in range(module.layer_idx + 1):
            cache.update(torch.randn(shape, generator=g).to(dt),
                         torch.randn(shape, generator=g).to(dt), layer)
        return hs, pe, mask, cache


def _rotary(module, hs: torch.Tensor, positions: torch.Tensor) -> tuple:
    """(cos, sin) at `positions` from the model's own rotary embedding (the `*RotaryEmbedding`
    class of the modeling file of the module's class or its nearest base, from its config;
    for the module's layer type where it has one per type, as Gemma 3)."""
    import inspect
    import sys
    rotary = next((c for cls in type(module).__mro__
                   for n, c in vars(sys.modules[cls.__module__]).items()
                   if n.endswith("RotaryEmbedding") and isinstance(c, type)), None)
    if rotary is None:
        raise refuse(module, "no *RotaryEmbedding class beside the module's to draw the "
                              "verification's position_embeddings from (--no-verify skips it)",
                     InputRefused)
    try:
        emb = rotary(module.config)
        kwargs = {}
        if "layer_type" in inspect.signature(inspect.unwrap(type(emb).forward)).parameters:
            kwargs["layer_type"] = getattr(module, "layer_type", None) or \
                module.config.layer_types[module.layer_idx]
        with torch.no_grad():
            return emb(hs, positions, **kwargs)
    except Exception as e:  # noqa: BLE001 - a model's own code, any exception
        raise refuse(module, f"{rotary.__name__}, which draws the verification's "
                              f"position_embeddings, fails on the module's config "
                              f"({type(e).__name__}: {e}; --no-verify skips it)",
                     InputRefused) from None


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy()


def schedule_params(tiling: str, sched: dict, batch: int, rows: int, phase: str) -> dict:
    """The params of a `phase` ("decode", "prefill") attention program under `tiling`:
    the defaults updated by `sched` (R, TILE_N, BW, NB, WEIGHTS_ON_CHIP), checked, with the
    derived BPR (coarse) and MAXN (the KV slot's rows: `rows` rounded up to TILE_N)."""
    params = {**ATTENTION_DEFAULTS[tiling], "WEIGHTS_ON_CHIP": 0}
    unknown = sorted(set(sched) - set(params))
    if unknown:
        raise LoweringError(f"unknown schedule setting {', '.join(unknown)} for {tiling} "
                            f"tiling of {phase} attention (it takes {', '.join(params)})")
    params.update(sched)
    r, tn = params["R"], params["TILE_N"]
    if params["WEIGHTS_ON_CHIP"] not in (0, 1):
        raise LoweringError("WEIGHTS_ON_CHIP is 0 (the weights re-read for every request) or 1 "
                            "(each region reads them once and keeps them on chip)")
    if r < 1 or tn < 1:
        raise LoweringError(f"R = {r} and TILE_N = {tn} must be positive")
    check_regions(tiling, batch, r, params)
    if tiling == "coarse":
        params["BPR"] = -(-(batch // params["NB"]) // r)
    params["MAXN"] = -(-rows // tn) * tn
    return params


def lower_hf_attention(module, example_inputs: tuple, tiling: str, sched: dict):
    """Lower a transformers decode attention in decode under `tiling` (params R,
    TILE_N, BW, NB as the bundled attention programs; WEIGHTS_ON_CHIP 0 or 1)."""
    from stepc.torch.lowering import TorchProgram
    s = HFDecodeShapes(module, tuple(example_inputs))
    params = schedule_params(tiling, sched, s.batch, s.past + 1, "decode")
    w = StepWriter()
    weights, tensors = declare(w, module, s, tiling, params)
    body = program_body(s, tiling, params["WEIGHTS_ON_CHIP"] == 1)
    w.graph(body)
    io = HFAttentionIO(s, tiling, params, weights)
    return TorchProgram(w.render(), tensors, module, {"tiling": tiling, **params}, io=io)
