"""Decode attention as transformers writes it (`LlamaAttention`, `Qwen3Attention`), lowered
whole from the module's config and weights (a block family, stepc/torch/families.py).

The forward is `module(hidden_states, position_embeddings, attention_mask, cache)`, one new
token per request:

- `hidden_states` `[B, 1, hidden]`;
- `position_embeddings` `(cos, sin)`, each `[B, 1, head_dim]` (from the model's rotary
  embedding at each request's position; any rope type whose cos/sin cover the whole head);
- `attention_mask` `[B, 1, 1, P + 1]`, bool (True attends) or additive (0 attends, -inf or
  the dtype's minimum masks), as transformers builds it; None attends to every position;
- `cache` a `DynamicCache` whose layer `layer_idx` holds the requests' past keys and values
  padded to a common length P: `[B, KV, P, head_dim]`.

Ragged lengths: request b's KV length is the number of its P cached positions the mask
attends to (padding on either side, or holes); the new token's column P must be attended.
The lengths are the program's external stream `kv_lens`; `values` gathers each request's
attended rows to the front of its cache slot, where the program reads them, and the mask in
the program's layout (`MASK`, one row of TILE_N per KV tile) masks the rest. Read the
values and traces before calling the module: its forward appends to the cache.

The emitted program runs the paper's decode-attention schedules (programs/attention_*.step:
static interleaved, static coarse-grained blocks, dynamic dispatch over R regions). Each
region, per request: the q/k/v projections head by head (re-reading the weights per
request), Qwen3's q/k RMS norms, RoPE (`rotate_half` as a product with a signed permutation
`ROT`), the 1/sqrt(head_dim) scale, then per KV head the append of the new key/value row
to the request's last KV tile (written back to the cache) and the softmax with the row
maximum subtracted over the request's KV tiles (the scores of one request are buffered on
chip between the max and the exponentials), and the o projection summed over the heads.
"""

from __future__ import annotations

import inspect
import os
from string import Template

import numpy as np
import torch

from stepc.torch.attention import ATTENTION_DEFAULTS, KV_LIB, REGION_IDS
from stepc.torch.capture import LoweringError
from stepc.torch.emit import StepWriter

_IMPLEMENTATIONS = ("eager", "sdpa")
_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16"}


def _site(module) -> str:
    """`Class.forward (file.py:line)` of the module's forward, for refusals."""
    fwd = inspect.unwrap(type(module).forward)  # past transformers' decorators
    try:
        line = inspect.getsourcelines(fwd)[1]
        return f"{type(module).__name__}.forward ({os.path.basename(inspect.getsourcefile(fwd))}:{line})"
    except (OSError, TypeError):
        return f"{type(module).__name__}.forward"


def _refuse(module, what: str) -> LoweringError:
    return LoweringError(f"{what}, in the top-level module {_site(module)}; stepc lowers "
                         "decode attention: one new token per request over a DynamicCache")


class HFDecodeShapes:
    """The sizes of one lowering, read from the module and its example inputs."""

    def __init__(self, module, example: tuple):
        cfg = module.config
        self.hidden = cfg.hidden_size
        self.heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = module.head_dim
        self.qpk = self.heads // self.kv_heads
        self.scaling = float(module.scaling)
        self.norm_eps = (float(module.q_norm.variance_epsilon)
                         if hasattr(module, "q_norm") else None)
        self.bias = module.q_proj.bias is not None
        impl = getattr(cfg, "_attn_implementation", None) or "eager"
        if impl not in _IMPLEMENTATIONS:
            raise _refuse(module, f"attention implementation `{impl}` is not lowered (choose "
                                  f"{' or '.join(_IMPLEMENTATIONS)})")
        if getattr(module, "sliding_window", None) is not None:
            raise _refuse(module, f"a sliding window of {module.sliding_window} tokens "
                                  "(layer type sliding_attention) is not lowered")
        if len(example) < 2:
            raise _refuse(module, "expected the forward arguments hidden_states, "
                                  "position_embeddings, attention_mask, cache")
        hs = example[0]
        if not isinstance(hs, torch.Tensor) or hs.dim() != 3 or hs.shape[-1] != self.hidden:
            raise _refuse(module, f"hidden_states must be [B, 1, {self.hidden}], found "
                                  f"{list(getattr(hs, 'shape', []))}")
        if hs.shape[1] != 1:
            raise _refuse(module, f"prefill (hidden_states {list(hs.shape)}: {hs.shape[1]} new "
                                  "tokens per request) is not lowered")
        if hs.dtype not in _DTYPES:
            raise _refuse(module, f"dtype {hs.dtype} is not lowered (f32 or bf16)")
        self.dtype = _DTYPES[hs.dtype]
        self.batch = hs.shape[0]
        cos, _ = self.rope_args(example[1], module)
        if cos.shape[-1] != self.head_dim:
            raise _refuse(module, f"rotary embeddings cover {cos.shape[-1]} of the "
                                  f"{self.head_dim} dims of a head (partial rotary) and are not "
                                  "lowered")
        self.past = self.past_length(example, module)

    @staticmethod
    def rope_args(pe, module) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin), given as a pair or stacked in one tensor `[2, B, 1, head_dim]`."""
        if isinstance(pe, torch.Tensor) and pe.dim() >= 1 and pe.shape[0] == 2:
            return pe[0], pe[1]
        if isinstance(pe, (tuple, list)) and len(pe) == 2:
            return pe[0], pe[1]
        raise _refuse(module, "position_embeddings must be (cos, sin), each [B, 1, head_dim]")

    def past_length(self, example: tuple, module) -> int:
        """P, the cache's padded length: from the cache, else from the mask."""
        cache = example[3] if len(example) > 3 else None
        if cache is not None:
            keys = _layer_kv(cache, module)[0]
            return int(keys.shape[2])
        mask = example[2] if len(example) > 2 else None
        if isinstance(mask, torch.Tensor) and mask.dim() == 4:
            return int(mask.shape[-1]) - 1
        raise _refuse(module, "no cache and no 4-D attention_mask: the cache's length is unknown")


def _layer_kv(cache, module) -> tuple[torch.Tensor, torch.Tensor]:
    layers = getattr(cache, "layers", None)
    idx = module.layer_idx
    if layers is None or idx >= len(layers) or getattr(layers[idx], "keys", None) is None:
        raise _refuse(module, f"the cache has no keys for layer_idx {idx} (pass a "
                              "DynamicCache holding the past keys and values)")
    return layers[idx].keys, layers[idx].values


class HFAttentionIO:
    """The forward arguments' program values, `kv_lens` trace and seeded examples."""

    def __init__(self, shapes: HFDecodeShapes, tiling: str, params: dict, names: dict):
        self.s, self.tiling, self.params, self.names = shapes, tiling, params, names

    def kv_lens(self, module, args: tuple) -> np.ndarray:
        """Each request's attended cached positions (the mask's first P columns)."""
        attend = self._attended(module, args)
        return attend.sum(axis=1).astype(np.int64)

    def _attended(self, module, args: tuple) -> np.ndarray:
        s, mask = self.s, args[2] if len(args) > 2 else None
        if mask is None:
            return np.ones((s.batch, s.past), dtype=bool)
        if tuple(mask.shape) != (s.batch, 1, 1, s.past + 1):
            raise _refuse(module, f"attention_mask is {list(mask.shape)}, expected "
                                  f"[{s.batch}, 1, 1, {s.past + 1}] (bool or additive)")
        m = mask[:, 0, 0].detach().cpu()
        attend = m.numpy() if m.dtype == torch.bool else (
            m.float() > torch.finfo(m.dtype).min / 2).numpy()
        if not attend[:, -1].all():
            raise _refuse(module, "the attention mask hides a request's new token")
        return attend[:, :-1]

    def traces(self, module, args: tuple) -> dict[str, np.ndarray]:
        return {"kv_lens": self.kv_lens(module, args)}

    def values(self, module, args: tuple) -> dict[str, np.ndarray]:
        s, p, n = self.s, self.params, self.names
        attend = self._attended(module, args)
        lens = attend.sum(axis=1)
        keys, vals = (_np(t) for t in _layer_kv(args[3], module))
        if keys.shape != (s.batch, s.kv_heads, s.past, s.head_dim):
            raise _refuse(module, f"the cache's keys are {list(keys.shape)}, expected "
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
        cos, sin = (_np(t).reshape(s.batch, s.head_dim)
                    for t in HFDecodeShapes.rope_args(args[1], module))
        state = {k: _np(v) for k, v in module.state_dict().items()}
        out = {n["K_CACHE"]: kc.reshape(-1, s.head_dim), n["V_CACHE"]: vc.reshape(-1, s.head_dim),
               n["MASK"]: mask.reshape(-1, tn), "ROT": rotate_half_matrix(s.head_dim),
               "SCALE": np.full((1, 1), s.scaling, np.float32)}
        rows = {"X": _np(args[0]).reshape(s.batch, s.hidden), "COS": cos, "SIN": sin}
        for name, a in rows.items():
            out[name] = self._regions(a) if self.tiling == "coarse" else a
        for name, key in n["weights"].items():
            w = state[key]
            out[name] = w.reshape(1, -1) if w.ndim == 1 else w
        return out

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

    def _regions(self, a: np.ndarray) -> np.ndarray:
        """[B, C] -> [R, BPR * NB, C]: row k NB + j of slice r is request (k R + r) NB + j."""
        p = self.params
        r, nb, bpr = p["R"], p["NB"], p["BPR"]
        out = np.zeros((r, bpr * nb, a.shape[1]), dtype=a.dtype)
        for reg in range(r):
            for k in range(bpr):
                first = (k * r + reg) * nb
                if first < a.shape[0]:
                    out[reg, k * nb:(k + 1) * nb] = a[first:first + nb]
        return out


def _rotary(module, hs: torch.Tensor, positions: torch.Tensor) -> tuple:
    """(cos, sin) at `positions` from the model's own rotary embedding (the `*RotaryEmbedding`
    class of the modeling file of the module's class or its nearest base, from its config)."""
    import sys
    rotary = next(c for cls in type(module).__mro__
                  for n, c in vars(sys.modules[cls.__module__]).items()
                  if n.endswith("RotaryEmbedding") and isinstance(c, type))
    with torch.no_grad():
        return rotary(module.config)(hs, positions)


def rotate_half_matrix(d: int) -> np.ndarray:
    """The signed permutation R with `x @ R == rotate_half(x) == cat(-x2, x1)`."""
    r = np.zeros((d, d), np.float32)
    h = d // 2
    for i in range(h):
        r[i + h, i] = -1.0
        r[i, i + h] = 1.0
    return r


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy()


def lower_hf_attention(module, example_inputs: tuple, tiling: str, sched: dict):
    """Lower an `LlamaAttention` / `Qwen3Attention` in decode under `tiling`."""
    from stepc.torch import TorchProgram
    s = HFDecodeShapes(module, tuple(example_inputs))
    params = dict(ATTENTION_DEFAULTS[tiling])
    unknown = sorted(set(sched) - set(params))
    if unknown:
        raise LoweringError(f"unknown schedule setting {', '.join(unknown)} for {tiling} "
                            f"tiling of decode attention (it takes {', '.join(params)})")
    params.update(sched)
    b, r, tn = s.batch, params["R"], params["TILE_N"]
    if r < 1 or tn < 1:
        raise LoweringError(f"R = {r} and TILE_N = {tn} must be positive")
    maxn = -(-(s.past + 1) // tn) * tn
    if tiling == "dynamic" and (b % r or b <= r):
        raise LoweringError(f"dynamic tiling needs B = {b} a multiple of R = {r} and B > R")
    if tiling == "coarse":
        nb = params["NB"]
        if nb < 1 or b % nb or b // nb < r:
            raise LoweringError(f"coarse tiling needs B = {b} a multiple of NB = {nb} with at "
                                f"least R = {r} blocks")
        params["BPR"] = -(-(b // nb) // r)
    params["MAXN"] = maxn
    w = StepWriter()
    names, tensors = _declare(w, module, s, tiling, params)
    body = _program_body(s, tiling)
    for line in body.strip("\n").split("\n"):
        code, _, comment = line.partition(" #")
        w.stmt(code.rstrip(), comment.strip()) if code.strip() else w.blank(
            comment.strip().lstrip("# ") if comment else "")
    io = HFAttentionIO(s, tiling, params, names)
    return TorchProgram(w.render(), tensors, module, {"tiling": tiling, **params}, io=io)


def _declare(w: StepWriter, module, s: HFDecodeShapes, tiling: str, params: dict):
    """Header, params and tensors. Returns (role names for the values, program tensor ->
    source)."""
    cls = type(module)
    title = (f"{cls.__name__} ({_site(module)}), layer {module.layer_idx}, lowered by "
             f"`stepc from-torch` ({tiling} tiling).")
    w.header += [title, ""] + _HEADER[tiling] + [""] + [
        "One decode step of B requests, one new token each. Per request, in its region: the",
        "q/k/v projections head by head (the weights re-read per request)"
        + (", the q/k RMS norms" if s.norm_eps is not None else "") + ", RoPE",
        "(x cos + rotate_half(x) sin, rotate_half = x ROT) and the softmax scale on q; then per",
        "KV head (a slot of MAXN rows of the caches) the new key/value row appended to its last",
        "KV tile and written back, softmax(q k^T + MASK) with the row max subtracted over the",
        "request's ceil((len + 1) / TILE_N) KV tiles, times V; the o projection sums the heads.",
        "kv_lens: --trace kv_lens=PATH (int [B], each < MAXN, the attended cached positions of",
        "each request); MASK masks the rows of the last tile past the new row.",
    ]
    sizes = (("B", s.batch, "requests in the batch"), ("R", params["R"], "parallel regions"),
             ("NB", params.get("NB"), "requests per block; block b runs on region b mod R"),
             ("HID", s.hidden, "hidden size"), ("H", s.heads, "query heads"),
             ("KV", s.kv_heads, "KV heads"), ("QPK", s.qpk, "query heads per KV head"),
             ("HEAD_DIM", s.head_dim, "head dim"), ("TILE_N", params["TILE_N"],
                                                     "KV rows per tile"),
             ("MAXN", params["MAXN"], "KV slot size in tokens (rows per request and KV head)"),
             ("BW", params["BW"], "FLOPs/cycle of each compute operator"),
             ("RO", "MAXN // TILE_N", "KV tiles per slot"))
    for name, value, doc in sizes:
        if value is not None:
            w.param(name, value, doc)
    if tiling == "coarse":
        w.param("NBLK", "B // NB", "blocks")
        w.param("BPR", "ceildiv(NBLK, R)", "blocks of region 0, the most any region has")
    dt = s.dtype
    rows = "R, BPR * NB, " if tiling == "coarse" else ""
    decls = [("X", f"{dt}[{rows or 'B, '}HID] input", "hidden_states [B, 1, HID]"),
             ("COS", f"{dt}[{rows or 'B, '}HEAD_DIM] input", "position_embeddings[0]"),
             ("SIN", f"{dt}[{rows or 'B, '}HEAD_DIM] input", "position_embeddings[1]")]
    weights = {}
    for proj, heads in (("q", "H"), ("k", "KV"), ("v", "KV"), ("o", None)):
        key = f"{proj}_proj.weight"
        shape = "[HID, H * HEAD_DIM]" if heads is None else f"[{heads} * HEAD_DIM, HID]"
        weights[f"W{proj.upper()}"] = key
        decls.append((f"W{proj.upper()}", f"{dt}{shape} weight", key))
        if s.bias:
            bshape = "[1, HID]" if heads is None else f"[1, {heads} * HEAD_DIM]"
            weights[f"B{proj.upper()}"] = f"{proj}_proj.bias"
            decls.append((f"B{proj.upper()}", f"{dt}{bshape} weight", f"{proj}_proj.bias"))
    if s.norm_eps is not None:
        for proj in "qk":
            weights[f"{proj.upper()}N"] = f"{proj}_norm.weight"
            decls.append((f"{proj.upper()}N", f"{dt}[1, HEAD_DIM] weight", f"{proj}_norm.weight"))
    ids = {"interleaved": "u64[B]", "dynamic": "u64[B]", "coarse": "u64[BPR, R, NB]"}[tiling]
    decls += [("ROT", f"{dt}[HEAD_DIM, HEAD_DIM] input", "rotate_half as a signed permutation"),
              ("SCALE", "f32[1, 1] input", f"the softmax scale {s.scaling:.6g}"),
              ("K_CACHE", f"{dt}[B * KV * MAXN, HEAD_DIM] scratch",
               "keys: slot b KV + g, the attended rows first"),
              ("V_CACHE", f"{dt}[B * KV * MAXN, HEAD_DIM] scratch", "values, as K_CACHE"),
              ("MASK", "f32[B * KV * RO, TILE_N] input", "0 on rows <= len, -inf past them"),
              ("IDX", f"{ids} input = arange", "request ids")]
    if tiling != "interleaved":
        decls += [("ONE", "u64[1] input = ones", "the constant 1")]
    if tiling == "dynamic":
        decls += [("INIT", "u64[1, R] input = arange", "round-robin start 0 .. R-1")]
    decls += [("O", f"{dt}[B, HID] output", "the attention output [B, 1, HID]")]
    width = max(len(d) for _, d, _ in decls)
    for name, decl, doc in decls:
        w.tensor(name, decl.ljust(width) if "weight" not in decl else decl, doc)
        w.taken.add(name)
    w.taken |= {"kv_lens", "free", "sig", "ids"}
    sources = {"X": "hidden_states", "COS": "position_embeddings", "SIN": "position_embeddings",
               "K_CACHE": "cache", "V_CACHE": "cache", "MASK": "attention_mask",
               "O": "output", **weights}
    names = {"K_CACHE": "K_CACHE", "V_CACHE": "V_CACHE", "MASK": "MASK", "weights": weights}
    return names, sources


def _program_body(s: HFDecodeShapes, tiling: str) -> str:
    mean = min(1024, max(1, s.past // 2))
    norm_q = "rms_norm(head_proj(x, WQ, $bq H), QN, H, x)" if s.norm_eps is not None \
        else "head_proj(x, WQ, $bq H)"
    norm_k = "rms_norm(head_proj(x, WK, $bk KV), KN, KV, x)" if s.norm_eps is not None \
        else "head_proj(x, WK, $bk KV)"
    region = _REGION.replace("$norm_q", norm_q).replace("$norm_k", norm_k)
    region = region.replace("$bias_o", _BIAS_O if s.bias else "")
    subst = {"dt": s.dtype, "K": "K_CACHE", "V": "V_CACHE", "mean": mean, "std": max(1, mean // 2),
             "eps": repr(s.norm_eps) if s.norm_eps is not None else "",
             "bq": "BQ," if s.bias else "", "bk": "BK," if s.bias else "",
             "bv": "BV," if s.bias else "", "out": "out" if s.bias else "acc"}
    proj = _HEAD_PROJ_BIAS if s.bias else _HEAD_PROJ
    lib = KV_LIB + proj + (_RMS_NORM if s.norm_eps is not None else "") + _ROPE + region
    return Template(lib + _BODY[tiling]).substitute(subst)


_HEADER = {
    "interleaved": ["STATIC INTERLEAVED parallelisation: request i runs on region i mod R (as",
                    "programs/attention_interleaved.step)."],
    "coarse": ["STATIC COARSE-GRAINED parallelisation: blocks of NB consecutive requests, block",
               "b on region b mod R (as programs/attention_coarse.step); region r reads its own",
               "slices X[r], COS[r], SIN[r]: row k NB + j is request (k R + r) NB + j."],
    "dynamic": ["DYNAMIC parallelisation: each request goes to whichever of the R regions",
                "frees up first (as programs/attention_dynamic.step, the paper's Figure 16)."],
}

_HEAD_PROJ = """
# Per-head projection: x [n] of [1, HID] -> [n, NH] of [1, HEAD_DIM] (W read once per request).
graph head_proj(x, W, NH) {
    xr = Repeat(x, count=NH)
    w  = LinearOffChipLoad(W, ref=x, tile=[HEAD_DIM, HID], shape=[NH], stride=[1])
    return Map(xr, w, fn=matmul(transpose=true), compute_bw=BW)
}
"""

_HEAD_PROJ_BIAS = """
# Per-head projection with bias: x [n] of [1, HID] -> [n, NH] of [1, HEAD_DIM].
graph head_proj(x, W, BIAS, NH) {
    xr = Repeat(x, count=NH)
    w  = LinearOffChipLoad(W, ref=x, tile=[HEAD_DIM, HID], shape=[NH], stride=[1])
    bs = LinearOffChipLoad(BIAS, ref=x, tile=[1, HEAD_DIM], shape=[NH], stride=[1])
    return Map(Map(xr, w, fn=matmul(transpose=true), compute_bw=BW), bs, fn=add, compute_bw=BW)
}
"""

_RMS_NORM = """
# RMSNorm over each head's row: h / rms(h) * G.
graph rms_norm(h, G, NH, x) {
    r = Map(h, fn=rms_inv(eps="$eps"), compute_bw=BW)
    g = LinearOffChipLoad(G, ref=x, tile=[1, HEAD_DIM], shape=[NH], stride=[0])
    return Map(Map(h, r, fn=mul, compute_bw=BW), g, fn=mul, compute_bw=BW)
}
"""

_ROPE = """
# RoPE: h cos + rotate_half(h) sin, cos/sin [n] of [1, HEAD_DIM] repeated over the NH heads.
graph rope(h, cs, sn, NH, x) {
    rot = LinearOffChipLoad(ROT, ref=x, tile=[HEAD_DIM, HEAD_DIM], shape=[NH], stride=[0])
    hr  = Map(h, rot, fn=matmul, compute_bw=BW)
    hc  = Map(h, Repeat(cs, count=NH), fn=mul, compute_bw=BW)
    hs  = Map(hr, Repeat(sn, count=NH), fn=mul, compute_bw=BW)
    return Map(hc, hs, fn=add, compute_bw=BW)
}
"""

_BIAS_O = """    bo   = LinearOffChipLoad(BO, ref=x, tile=[1, HID], stride=[0], shape=[1])
    out  = Map(acc, Flatten(bo, min=0, max=1), fn=add, compute_bw=BW)
"""

# One region: x [n] of [1, HID], cs/sn [n] of [1, HEAD_DIM], bidx/lens [n]. Returns the
# output store's acknowledgements and one signal per request once its K cache is read.
_REGION = """
# One region over its n requests (x [n] of [1, HID], cs/sn [n] of [1, HEAD_DIM], ids and
# lengths [n]): stores each request's [1, HID] output at row b of O; also returns one signal
# per request once its whole K cache has been read (the dynamic dispatch listens to it).
graph hf_region(x, cs, sn, bidx, lens) {
    # per KV head g: slot b KV + g, ntiles = ceil((len + 1) / TILE_N), off = len mod TILE_N
    kvn     = Map(Map(bidx, fn=mod_int(by=1)), fn=ceildiv_int(by=1, plus=KV))   # the constant KV
    slot    = FlatMap(Zip(bidx, kvn), fn=cache_read_addr(row_offset=KV))          # [n, KV]
    assume dim(slot, 0) == KV
    glens   = Repeat(lens, count=KV)
    ntiles  = Map(glens, fn=ceildiv_int(by=TILE_N, plus=1))
    lastrow = Map(glens, fn=ceildiv_int(by=TILE_N, plus=1 - TILE_N))
    off     = Flatten(Map(lastrow, glens, fn=cache_write_addr(row_offset=-TILE_N)), min=0, max=1)
    kraw    = kv_load(slot, ntiles, $K)                                # [n, KV, L]
    sig     = Accum(kraw, fn=signal_req_all_read, rank=2)             # [n]
    fslot   = Flatten(slot, min=0, max=1)                              # [m = n KV]
    fnt     = Flatten(ntiles, min=0, max=1)

    qh = rope($norm_q, cs, sn, H, x)                                   # [n, H] of [1, HEAD_DIM]
    sc = LinearOffChipLoad(SCALE, ref=x, tile=[1, 1], shape=[H], stride=[0])
    qs = Map(qh, sc, fn=mul, compute_bw=BW)
    qk = Accum(Reshape(qs, chunk=QPK), fn=retile_row, rank=1)          # [n, KV] of [QPK, HEAD_DIM]
    q  = Repeat(Flatten(qk, min=0, max=1), count=1)                    # [m, 1]
    kn = Flatten(rope($norm_k, cs, sn, KV, x), min=0, max=1)           # [m] of [1, HEAD_DIM]
    vn = Flatten(head_proj(x, WV, $bv KV), min=0, max=1)

    k    = kv_append(Flatten(kraw, min=1, max=2), fslot, fnt, off, kn, $K)   # [m, L]
    vraw = kv_load(fslot, fnt, $V)
    v    = kv_append(vraw, fslot, fnt, off, vn, $V)
    assume shape(v) == shape(k)
    maddr = FlatMap(Zip(fslot, fnt, depth=16), fn=cache_read_addr(row_offset=RO))
    mask  = RandomOffChipLoad(maddr, MASK, tile=[1, TILE_N])          # [m, L] of [1, TILE_N]
    assume shape(mask) == shape(k)
    qk_t = Map(Expand(q, ref=k), k, fn=matmul(transpose=true), compute_bw=BW)
    s    = Map(qk_t, mask, fn=add, compute_bw=BW)                      # [m, L] of [QPK, TILE_N]
    mx   = Accum(Map(s, fn=row_max, compute_bw=BW), fn=max, rank=1, compute_bw=BW)  # [m] of [QPK, 1]
    sb   = Streamify(Bufferize(s, rank=1))                             # the scores again
    e    = Map(Map(sb, Expand(Repeat(mx, count=1), ref=sb), fn=sub, compute_bw=BW), fn=exp, compute_bw=BW)
    num  = Accum(e, v, fn=matmul, rank=1, dtype=f32, compute_bw=BW)    # [m] of [QPK, HEAD_DIM]
    den  = Map(Accum(e, fn=add, rank=1, dtype=f32, compute_bw=BW), fn=row_sum, compute_bw=BW)
    att  = Map(num, den, fn=div, dtype=$dt, compute_bw=BW)

    # o_proj: head h's row of att times its [HID, HEAD_DIM] slice of WO, summed over heads
    rows = Reshape(FlatMap(att, fn=retile_streamify), chunk=H)         # [n, H] of [1, HEAD_DIM]
    wo   = LinearOffChipLoad(WO, ref=x, tile=[HID, HEAD_DIM], shape=[H], stride=[1])
    acc  = Accum(rows, wo, fn=matmul(transpose=true), rank=1, dtype=$dt, compute_bw=BW)
$bias_o    return RandomOffChipStore(bidx, $out, O, depth=[16, 2]), sig
}
"""

_LOADS = """
idx = MetadataGen(IDX)
x   = LinearOffChipLoad(X, tile=[1, HID], shape=[B])                  # [B] of [1, HID]
cs  = LinearOffChipLoad(COS, tile=[1, HEAD_DIM], shape=[B])
sn  = LinearOffChipLoad(SIN, tile=[1, HEAD_DIM], shape=[B])
"""

_BODY = {
    "interleaved": _LOADS + """
px = Parallelize(x, consumers=R)                                       # request i: region i mod R
pc = Parallelize(cs, consumers=R)
ps = Parallelize(sn, consumers=R)
pi = Parallelize(idx, consumers=R)
pl = Parallelize(kv_lens, consumers=R)

for r in 0..R {
    ack, done = hf_region(px[r], pc[r], ps[r], pi[r], pl[r])
    Sink(ack)
    Sink(done)
}
""",
    "dynamic": """
stream free : Strm<MultiHot<R>, 0>[B]                                  # the region of each request
""" + _LOADS + """
# 1. Route each request by `free`; the Partitions share the counts n_r.
px = Partition(x, free, rank=0, consumers=R, dim="n")
pc = Partition(cs, free, rank=0, consumers=R, dim="n")
ps = Partition(sn, free, rank=0, consumers=R, dim="n")
pi = Partition(idx, free, rank=0, consumers=R, dim="n")
pl = Partition(kv_lens, free, rank=0, consumers=R, dim="n")

for r in 0..R {
    ack, sig[r] = hf_region(px[r], pc[r], ps[r], pi[r], pl[r])      # 2. a signal per request
    Sink(ack)
}

# 3. Which region freed up, in order; keep the first B - R selectors.
done, who = EagerMerge(sig)
assume shape(who) == [B]
Sink(done)
nchunks = Map(MetadataGen(ONE), fn=ceildiv_int(by=1, plus=B // R - 1))   # the constant B / R
keep    = Flatten(FlatMap(nchunks, fn=filter_last_tile), min=0, max=1)   # {1} x (B/R - 1), {0}
assume shape(keep) == [B // R]
kp = Partition(Reshape(who, chunk=R), keep, rank=1, consumers=2, dim="c")
assume shape(kp[1]) == [B // R - 1, R]
assume shape(kp[0]) == [1, R]
Sink(kp[0])

# 4. The first R requests round-robin, then the kept selectors. 5. Close the loop.
init   = SelectGen(INIT, n=R, onehot=true)
sel, _ = EagerMerge([init, kp[1]], rank=1)
free   = Flatten(sel, min=0, max=1)
""",
    "coarse": REGION_IDS + """
blocks = Parallelize(Reshape(kv_lens, chunk=NB), consumers=R, rank=1)  # blocks[r]: [n_r, NB]

for r in 0..R {
    n    = ceildiv(NBLK - r, R)                                        # region r's blocks
    nr   = n * NB                                                      # and requests
    lens = Flatten(blocks[r], min=0, max=1, depth=nr)
    idx  = region_ids(r, n)
    assume shape(idx) == [nr]
    x    = LinearOffChipLoad(X[r], tile=[1, HID], shape=[nr])
    cs   = LinearOffChipLoad(COS[r], tile=[1, HEAD_DIM], shape=[nr])
    sn   = LinearOffChipLoad(SIN[r], tile=[1, HEAD_DIM], shape=[nr])
    ack, done = hf_region(x, cs, sn, idx, lens)
    Sink(ack)
    Sink(done)
}
""",
}
