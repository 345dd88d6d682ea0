"""The program text of transformers decode attention (stepc.torch.hf_attention): the sizes
of one lowering read from the module and its example inputs (`HFDecodeShapes`), header,
params and tensors from them, and the region graph run under the paper's interleaved,
coarse and dynamic schedules (programs/attention_*.step)."""

from __future__ import annotations

import inspect
import os
import re
from string import Template

import torch

from stepc.torch.attention import KV_LIB, REGION_IDS
from stepc.torch.capture import InputRefused, LoweringError
from stepc.torch.emit import StepWriter
from stepc.torch.hf_attention_forms import read_form


def site(module) -> str:
    """`Class.forward (file.py:line)` of the module's forward, for refusals."""
    fwd = inspect.unwrap(type(module).forward)  # past transformers' decorators
    name = getattr(fwd, "__qualname__", f"{type(module).__name__}.forward")
    try:
        path, line = inspect.getsourcefile(fwd), inspect.getsourcelines(fwd)[1]
    except (OSError, TypeError):
        return name
    return f"{name} ({os.path.basename(path)}:{line})"


_IMPLEMENTATIONS = ("eager", "sdpa")
_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16"}


def refuse(module, what: str, kind: type[LoweringError] = LoweringError) -> LoweringError:
    """`what` the lowering does not do, named with the module's forward; a part of the
    module the family does not lower is an `InputRefused` (a usage error)."""
    return kind(f"{what}, in the top-level module {site(module)}; stepc lowers "
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
        impl = getattr(cfg, "_attn_implementation", None) or "eager"
        if impl not in _IMPLEMENTATIONS:
            raise refuse(module, f"attention implementation `{impl}` is not lowered (choose "
                                  f"{' or '.join(_IMPLEMENTATIONS)})")
        if len(example) < 2:
            raise refuse(module, "expected the forward arguments hidden_states, "
                                  "position_embeddings, attention_mask, cache")
        hs = example[0]
        if not isinstance(hs, torch.Tensor) or hs.dim() != 3 or hs.shape[-1] != self.hidden:
            raise refuse(module, f"hidden_states must be [B, 1, {self.hidden}], found "
                                  f"{list(getattr(hs, 'shape', []))}")
        if hs.shape[1] != 1:
            raise refuse(module, f"prefill (hidden_states {list(hs.shape)}: {hs.shape[1]} new "
                                  "tokens per request) is not lowered")
        if hs.dtype not in _DTYPES:
            raise refuse(module, f"dtype {hs.dtype} is not lowered (f32 or bf16)")
        self.dtype = _DTYPES[hs.dtype]
        self.batch = hs.shape[0]
        cos, sin = self.rope_args(example[1], module)
        if any(tuple(t.shape[:-1]) != (self.batch, 1) for t in (cos, sin)) or \
                cos.shape[-1] != sin.shape[-1]:
            raise refuse(module, f"position_embeddings (cos, sin) are {list(cos.shape)} and "
                                  f"{list(sin.shape)}, expected [{self.batch}, 1, "
                                  f"{self.head_dim}] each (or fewer dims: partial rotary)")
        self.rotary_dim = int(cos.shape[-1])
        self.form = read_form(module, self.rotary_dim,
                               lambda what: refuse(module, what, InputRefused))
        self.scaling, self.norm_eps = self.form.scaling, self.form.norm_eps
        self.bias, self.bias_o = self.form.bias, self.form.bias_o
        if self.form.softcap is not None and impl != "eager":
            raise refuse(module, f"logit soft-capping under the `{impl}` attention "
                                  "implementation (transformers computes it under eager)",
                         InputRefused)
        self.past = self.past_length(example, module)

    @staticmethod
    def rope_args(pe, module) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin), given as a pair or stacked in one tensor `[2, B, 1, head_dim]`."""
        if isinstance(pe, torch.Tensor) and pe.dim() >= 1 and pe.shape[0] == 2:
            return pe[0], pe[1]
        if isinstance(pe, (tuple, list)) and len(pe) == 2:
            return pe[0], pe[1]
        raise refuse(module, "position_embeddings must be (cos, sin), each [B, 1, head_dim]")

    def past_length(self, example: tuple, module) -> int:
        """P, the cache's padded length: from the cache, else from the mask."""
        cache = example[3] if len(example) > 3 else None
        if cache is not None:
            keys = layer_kv(cache, module)[0]
            return int(keys.shape[2])
        mask = example[2] if len(example) > 2 else None
        if isinstance(mask, torch.Tensor) and mask.dim() == 4:
            return int(mask.shape[-1]) - 1
        raise refuse(module, "no cache and no 4-D attention_mask: the cache's length is unknown")


def layer_kv(cache, module) -> tuple[torch.Tensor, torch.Tensor]:
    layers = getattr(cache, "layers", None)
    idx = module.layer_idx
    if layers is None or idx >= len(layers) or getattr(layers[idx], "keys", None) is None:
        raise refuse(module, f"the cache has no keys for layer_idx {idx} (pass a "
                              "DynamicCache holding the past keys and values)")
    return layers[idx].keys, layers[idx].values


def declare(w: StepWriter, module, s: HFDecodeShapes, tiling: str, params: dict):
    """Header, params and tensors. Returns (weight tensor -> its `Slice` of the state dict,
    program tensor -> source)."""
    title = (f"{site(module)}, layer {module.layer_idx}, lowered by `stepc from-torch` "
             f"({tiling} tiling).")
    w.header += [title, ""] + _HEADER[tiling] + [""] + [
        "One decode step of B requests, one new token each. Per request, in its region: the",
        f"q/k/v projections head by head, {norms_phrase(s)}RoPE (x cos + rotate_half(x) sin,",
        "rotate_half = x ROT) and the softmax scale on q; then per KV head (a slot of MAXN rows",
        "of the caches) the new key/value row appended to its last KV tile and written back,",
        "softmax(q k^T + MASK) with the row max subtracted over the request's",
        "ceil((len + 1) / TILE_N) KV tiles, times V; the o projection sums the heads.",
        *variant_lines(s),
        _WEIGHTS[params["WEIGHTS_ON_CHIP"]],
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
    shapes = {"WQ": "[H * HEAD_DIM, HID]", "WK": "[KV * HEAD_DIM, HID]",
              "WV": "[KV * HEAD_DIM, HID]", "WO": "[HID, H * HEAD_DIM]", "BQ": "[1, H * HEAD_DIM]",
              "BK": "[1, KV * HEAD_DIM]", "BV": "[1, KV * HEAD_DIM]", "BO": "[1, HID]",
              "QN": "[1, HEAD_DIM]", "KN": "[1, HEAD_DIM]"}
    weights = s.form.weights
    for name, src in weights.items():
        decls.append((name, f"{dt}{shapes[name]} weight", src.source()))
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
    decls += [("O", f"{dt}[B, HID] output", "the attention output [B, 1, HID]"),
              ("K_NEW", f"{dt}[B * KV, HEAD_DIM] output", "the cache's new keys [B, KV, 1, D]"),
              ("V_NEW", f"{dt}[B * KV, HEAD_DIM] output", "and values")]
    width = max(len(d) for _, d, _ in decls)
    for name, decl, doc in decls:
        w.tensor(name, decl.ljust(width), doc)
        w.taken.add(name)
    w.taken |= {"kv_lens", "free", "sig", "ids"}
    sources = {"X": "hidden_states", "COS": "position_embeddings", "SIN": "position_embeddings",
               "K_CACHE": "cache", "V_CACHE": "cache", "MASK": "attention_mask",
               "O": "output", "K_NEW": "cache", "V_NEW": "cache",
               **{name: src.source() for name, src in weights.items()}}
    return weights, sources


def norms_phrase(s: HFDecodeShapes) -> str:
    """The q/k norms in the header's list of steps ("" without them)."""
    return "" if s.norm_eps is None else \
        f"the q/k RMS norms ({'1 + w' if s.form.norm_offset else 'w'} scale), "


def variant_lines(s: HFDecodeShapes) -> list[str]:
    """The header's lines on the parts of the module's form beyond Llama's."""
    f = s.form
    return [line for line, on in (
        ("q, k and v are row blocks of the fused qkv_proj weight.", f.fused),
        (f"Partial rotary: RoPE over the first {s.rotary_dim} dims of a head (COS 1 and SIN 0 "
         "past them).", s.rotary_dim < s.head_dim),
        (f"Logit soft-capping: tanh(s / {f.softcap}) {f.softcap} on the scores before the "
         "mask.", f.softcap is not None)) if on]


def soft_capping(scores: str, capped: str, cap: float | None) -> str:
    """The statement `capped = tanh(scores / cap) cap` of a region ("" without capping)."""
    if cap is None:
        return ""
    return (f"    {capped} = Map(Map(Map({scores}, fn=affine(scale=\"{1.0 / cap!r}\"), "
            f"compute_bw=BW), fn=tanh, compute_bw=BW), fn=affine(scale=\"{cap!r}\"), "
            "compute_bw=BW)\n")


def program_body(s: HFDecodeShapes, tiling: str, weights_on_chip: bool,
                 region: str | None = None) -> str:
    """The graphs and statements; `weights_on_chip`: each region reads the weights (and the
    other constants) once and keeps them on chip, instead of once per request. `region`: the
    graph `hf_region` to run (decode's by default; stepc.torch.hf_prefill passes its own)."""
    mean = min(1024, max(1, s.past // 2))
    norm_q = "rms_norm(head_proj(x, WQ, $bq H), QN, H, x)" if s.norm_eps is not None \
        else "head_proj(x, WQ, $bq H)"
    norm_k = "rms_norm(head_proj(x, WK, $bk KV), KN, KV, x)" if s.norm_eps is not None \
        else "head_proj(x, WK, $bk KV)"
    region = (region or _REGION).replace("$norm_q", norm_q).replace("$norm_k", norm_k)
    region = region.replace("$bias_o", _BIAS_O if s.bias_o else "")
    softcap = s.form.softcap
    region = region.replace("$softcap", soft_capping("qk_t", "capped", softcap))
    region = region.replace("$scores", "qk_t" if softcap is None else "capped")
    subst = {"dt": s.dtype, "K": "K_CACHE", "V": "V_CACHE", "mean": mean, "std": max(1, mean // 2),
             "eps": repr(s.norm_eps) if s.norm_eps is not None else "",
             "bq": "BQ," if s.bias else "", "bk": "BK," if s.bias else "",
             "bv": "BV," if s.bias else "", "out": "out" if s.bias_o else "acc"}
    proj = _HEAD_PROJ_BIAS if s.bias else _HEAD_PROJ
    lib = proj + (_RMS_NORM if s.norm_eps is not None else "") + _ROPE + region
    if weights_on_chip:
        lib = _PER_REQUEST.sub(_ON_CHIP, lib)
    return Template(KV_LIB + lib + _BODY[tiling]).substitute(subst)


# A constant tensor's tiles read once per request (`ref=x`); on chip: read once, buffered,
# and streamed from the buffer once per request.
_PER_REQUEST = re.compile(r"LinearOffChipLoad\((\w+), ref=x, tile=(\[[^\]]*\]), "
                          r"shape=\[(\w+)\], stride=\[(\d)\]\)")
_ON_CHIP = (r"Flatten(Streamify(Bufferize(LinearOffChipLoad(\1, tile=\2, shape=[1, \3], "
            r"stride=[0, \4]), rank=1), ref=Promote(x)), min=1, max=2)")


_WEIGHTS = ("The weights are re-read from HBM for every request (WEIGHTS_ON_CHIP=0).",
            "Each region reads the weights once and keeps them on chip (WEIGHTS_ON_CHIP=1).")

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

_BIAS_O = """    bo   = LinearOffChipLoad(BO, ref=x, tile=[1, HID], shape=[1], stride=[0])
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
    Sink(RandomOffChipStore(fslot, kn, K_NEW))                         # the cache update, as
    Sink(RandomOffChipStore(fslot, vn, V_NEW))                         # the module returns it
    assume shape(v) == shape(k)
    maddr = FlatMap(Zip(fslot, fnt, depth=16), fn=cache_read_addr(row_offset=RO))
    mask  = RandomOffChipLoad(maddr, MASK, tile=[1, TILE_N])          # [m, L] of [1, TILE_N]
    assume shape(mask) == shape(k)
    qk_t = Map(Expand(q, ref=k), k, fn=matmul(transpose=true), compute_bw=BW)
$softcap    s    = Map($scores, mask, fn=add, compute_bw=BW)                   # [m, L] of [QPK, TILE_N]
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
