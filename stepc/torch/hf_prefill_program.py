"""The program text of transformers attention in prefill (stepc.torch.hf_prefill): S new
tokens per request under a causal mask, the second schedule of the decode program
(stepc.torch.hf_attention_program), whose sizes, declarations and graphs it reuses with
each request's rows as one `[S, ...]` tile instead of `[1, ...]`."""

from __future__ import annotations

import re

import torch

from stepc.torch.capture import LoweringError
from stepc.torch.emit import StepWriter
from stepc.torch.hf_attention_program import (
    HFDecodeShapes,
    declare,
    norms_phrase,
    program_body,
    refuse,
    site,
    soft_capping,
    variant_lines,
)


def refuse_prefill(module, what: str, kind: type[LoweringError] = LoweringError) -> LoweringError:
    """`refuse`, saying that prefill is lowered too."""
    return kind(f"{what}, in the top-level module {site(module)}; stepc lowers attention "
                "over a DynamicCache in decode (one new token per request) or prefill (S new "
                "tokens per request under a causal mask)")


class HFPrefillShapes(HFDecodeShapes):
    """The decode sizes and the module's form (read from the module and the first new token
    of each request), plus S, the new tokens per request."""

    def __init__(self, module, example: tuple):
        hs = example[0]
        self.new = int(hs.shape[1])
        hidden = module.config.hidden_size
        if hs.shape[-1] != hidden:
            raise refuse_prefill(module, f"prefill of {self.new} new tokens per request: "
                                         f"hidden_states must be [B, S, {hidden}], found "
                                         f"{list(hs.shape)}")
        try:
            super().__init__(module, _first_token(example, self.new))
        except LoweringError as e:  # the decode suffix would say one new token
            tail = str(refuse(module, ""))
            raise refuse_prefill(module, str(e).removesuffix(tail), type(e)) from None
        want = (self.batch, self.new, self.rotary_dim)
        cos, sin = self.rope_args(example[1], module)
        if any(tuple(t.shape) != want for t in (cos, sin)):
            raise refuse_prefill(module, f"prefill of {self.new} new tokens per request: "
                                         f"position_embeddings (cos, sin) are "
                                         f"{list(cos.shape)} and {list(sin.shape)}, expected "
                                         f"{list(want)} each")
        mask = example[2] if len(example) > 2 else None
        if mask is not None:
            check_mask(module, self, mask)


def check_mask(module, s: HFPrefillShapes, mask) -> None:
    """Refuse an attention mask that is not `[B, 1, S, P + S]`."""
    want = [s.batch, 1, s.new, s.past + s.new]
    if not isinstance(mask, torch.Tensor) or list(mask.shape) != want:
        raise refuse_prefill(module, f"prefill of {s.new} new tokens per request: "
                                     f"attention_mask is {list(getattr(mask, 'shape', []))}, "
                                     f"expected {want} (bool or additive; transformers' causal "
                                     "mask over the P cached and S new positions)")


def _first_token(example: tuple, new: int) -> tuple:
    """The forward arguments as one decode step of each request's first new token: the
    mask's first query row over the cache and that token."""
    hs, rest = example[0][:, :1], list(example[1:])
    if rest:
        pe = rest[0]
        if isinstance(pe, torch.Tensor) and pe.dim() == 4:
            rest[0] = pe[:, :, :1]
        elif isinstance(pe, (tuple, list)) and len(pe) == 2 and all(
                isinstance(t, torch.Tensor) and t.dim() == 3 for t in pe):
            rest[0] = (pe[0][:, :1], pe[1][:, :1])
    if len(rest) > 1 and isinstance(rest[1], torch.Tensor) and rest[1].dim() == 4:
        rest[1] = rest[1][:, :, :1, :rest[1].shape[-1] - new + 1]
    return (hs, *rest)


def declare_prefill(module, s: HFPrefillShapes, tiling: str, params: dict):
    """The decode program's declarations with each request's rows S deep, and the causal
    mask of the new rows. Returns (writer, weights, tensor sources)."""
    decode = StepWriter()
    weights, sources = declare(decode, module, s, tiling, params)
    w = StepWriter(taken=set(decode.taken) | {"S"})
    w.header += [decode.header[0].replace("lowered by", "in prefill, lowered by"), ""]
    w.header += decode.header[2:decode.header.index("", 2)] + [""] + [
        "Prefill: S new tokens for each of B requests, under a causal mask (new token i sees",
        "the request's cached rows and the new rows <= i). Per request, in its region, as",
        "decode attention with each request's rows one [S, ...] tile: the q/k/v projections",
        f"head by head, {norms_phrase(s)}RoPE, the softmax scale on q, the QPK query heads of",
        "a KV head stacked as one [QPK * S, HEAD_DIM] query. Per KV head (a slot of MAXN rows of",
        "the caches): the S new key/value rows appended at rows len .. len + S - 1 of the slot",
        "(and to K_NEW, V_NEW: the rows the module appends); the scores over the request's",
        "ceil((len + 1) / TILE_N) cached tiles (+ MASK) and over its new rows (+ CAUSAL), each",
        "part with its row max subtracted, rescaled to their common max and summed; times V;",
        "the o projection sums the heads.",
        *variant_lines(s),
        *decode.header[-3:],
    ]
    w.header[-1] = "each request); MASK masks the cached tiles' rows past len."
    for name, value, doc in decode.params:
        w.param(name, value, doc)
        if name == "HEAD_DIM":
            w.param("S", s.new, "new tokens per request")
    rows = "R, BPR * NB * S, " if tiling == "coarse" else "B * S, "
    dt = s.dtype
    shapes = {"X": (f"{dt}[{rows}HID] input", "hidden_states [B, S, HID]"),
              "COS": (f"{dt}[{rows}HEAD_DIM] input", "position_embeddings[0] [B, S, HEAD_DIM]"),
              "SIN": (f"{dt}[{rows}HEAD_DIM] input", "position_embeddings[1]"),
              "K_CACHE": (None, "keys: slot b KV + g, cached then new rows"),
              "MASK": (None, "0 on rows < len, masked past them"),
              "O": (f"{dt}[B * S, HID] output", "the attention output [B, S, HID]"),
              "K_NEW": (f"{dt}[B * KV * S, HEAD_DIM] output", "the cache's new keys "
                                                              "[B, KV, S, D]")}
    decls = [(n, *(shapes[n][i] or d for i, d in enumerate((decl.strip(), doc))))
             if n in shapes else (n, decl.strip(), doc) for n, decl, doc in decode.tensors]
    decls = [(n, decl.replace("[B * KV, HEAD_DIM]", "[B * KV * S, HEAD_DIM]"), doc)
             for n, decl, doc in decls]
    at = next(i for i, (n, _, _) in enumerate(decls) if n == "MASK") + 1
    decls.insert(at, ("CAUSAL", "f32[QPK * S, S] input",
                      "row j S + i: 0 on columns <= i, else masked"))
    w.taken.add("CAUSAL")
    width = max(len(d) for _, d, _ in decls)
    for name, decl, doc in decls:
        w.tensor(name, decl.ljust(width), doc)
    return w, weights, sources


# Each request's rows of X, COS and SIN: one [S, ...] tile (decode loads [1, ...]).
_ROW_LOADS = re.compile(r"(LinearOffChipLoad\((?:X|COS|SIN)(?:\[r\])?, tile=\[)1, ")


def prefill_body(s: HFPrefillShapes, tiling: str, weights_on_chip: bool) -> str:
    """The decode program's graphs and statements with the prefill region."""
    cap = s.form.softcap
    region = _PREFILL_REGION.replace("$cap_new", soft_capping("qkn", "cappedn", cap))
    region = region.replace("$new_scores", "qkn" if cap is None else "cappedn")
    text, loads = _ROW_LOADS.subn(r"\1S, ", program_body(s, tiling, weights_on_chip, region))
    if loads != 3:
        raise AssertionError(f"expected 3 row loads (X, COS, SIN) in the decode body, found "
                             f"{loads}")
    return text


# One region: x [n] of [S, HID], cs/sn [n] of [S, HEAD_DIM], bidx/lens [n]. The placeholders
# are decode's (stepc.torch.hf_attention_program.program_body fills them).
_PREFILL_REGION = """
# One region over its n requests (x [n] of [S, HID], cs/sn [n] of [S, HEAD_DIM], ids and
# lengths [n]): stores each request's [S, HID] output at rows b S of O; also returns one
# signal per request once its whole K cache has been read (the dynamic dispatch listens to it).
graph hf_region(x, cs, sn, bidx, lens) {
    # per KV head g: slot b KV + g, its cached rows in ntiles = ceil((len + 1) / TILE_N) tiles
    kvn     = Map(Map(bidx, fn=mod_int(by=1)), fn=ceildiv_int(by=1, plus=KV))   # the constant KV
    slot    = FlatMap(Zip(bidx, kvn), fn=cache_read_addr(row_offset=KV))          # [n, KV]
    assume dim(slot, 0) == KV
    glens   = Repeat(lens, count=KV)
    ntiles  = Map(glens, fn=ceildiv_int(by=TILE_N, plus=1))
    kraw    = kv_load(slot, ntiles, $K)                                # [n, KV, L]
    sig     = Accum(kraw, fn=signal_req_all_read, rank=2)             # [n]
    fslot   = Flatten(slot, min=0, max=1)                              # [m = n KV]
    fnt     = Flatten(ntiles, min=0, max=1)
    flen    = Flatten(glens, min=0, max=1)

    qh = rope($norm_q, cs, sn, H, x)                                   # [n, H] of [S, HEAD_DIM]
    sc = LinearOffChipLoad(SCALE, ref=x, tile=[1, 1], shape=[H], stride=[0])
    qs = Map(qh, sc, fn=mul, compute_bw=BW)
    qk = Accum(Reshape(qs, chunk=QPK), fn=retile_row, rank=1)          # [n, KV] of [QPK S, D]
    qm = Flatten(qk, min=0, max=1)                                     # [m] of [QPK S, D]
    kn = Flatten(rope($norm_k, cs, sn, KV, x), min=0, max=1)           # [m] of [S, HEAD_DIM]
    vn = Flatten(head_proj(x, WV, $bv KV), min=0, max=1)

    # the append: new row i at row slot MAXN + len + i of the caches
    base = Map(fslot, flen, fn=cache_write_addr(row_offset=MAXN))
    nrow = Map(Map(flen, fn=mod_int(by=1)), fn=ceildiv_int(by=1, plus=S))   # the constant S
    radr = Flatten(FlatMap(Zip(base, nrow), fn=cache_read_addr(row_offset=1)), min=0, max=1)
    krow = FlatMap(kn, fn=retile_streamify)                            # [m S] of [1, HEAD_DIM]
    vrow = FlatMap(vn, fn=retile_streamify)
    assume shape(radr) == shape(krow)
    Sink(RandomOffChipStore(radr, krow, $K))
    Sink(RandomOffChipStore(radr, vrow, $V))
    Sink(RandomOffChipStore(fslot, kn, K_NEW))                         # the cache update, as
    Sink(RandomOffChipStore(fslot, vn, V_NEW))                         # the module returns it

    # the cached rows: scores, row max, exponentials, weighted values and sums
    k     = Flatten(kraw, min=1, max=2)                                # [m, L] of [TILE_N, D]
    v     = kv_load(fslot, fnt, $V)
    assume shape(v) == shape(k)
    maddr = FlatMap(Zip(fslot, fnt, depth=16), fn=cache_read_addr(row_offset=RO))
    mask  = RandomOffChipLoad(maddr, MASK, tile=[1, TILE_N])          # [m, L] of [1, TILE_N]
    assume shape(mask) == shape(k)
    q    = Repeat(qm, count=1)                                         # [m, 1]
    qk_t = Map(Expand(q, ref=k), k, fn=matmul(transpose=true), compute_bw=BW)
$softcap    s    = Map($scores, mask, fn=add, compute_bw=BW)    # [m, L] of [QPK S, TILE_N]
    rmax = Map(s, fn=row_max, compute_bw=BW)
    mxc  = Accum(rmax, fn=max, rank=1, compute_bw=BW)                  # [m] of [QPK S, 1]
    sb   = Streamify(Bufferize(s, rank=1))                             # the scores again
    d    = Map(sb, Expand(Repeat(mxc, count=1), ref=sb), fn=sub, compute_bw=BW)
    e    = Map(d, fn=exp, compute_bw=BW)
    numc = Accum(e, v, fn=matmul, rank=1, dtype=f32, compute_bw=BW)    # [m] of [QPK S, D]
    denc = Map(Accum(e, fn=add, rank=1, dtype=f32, compute_bw=BW), fn=row_sum, compute_bw=BW)

    # the new rows, under the causal mask
    cm   = LinearOffChipLoad(CAUSAL, ref=x, tile=[QPK * S, S], shape=[KV], stride=[0])
    qkn  = Map(qm, kn, fn=matmul(transpose=true), compute_bw=BW)      # [m] of [QPK S, S]
$cap_new    sx   = Map($new_scores, Flatten(cm, min=0, max=1), fn=add, compute_bw=BW)
    mxn  = Map(sx, fn=row_max, compute_bw=BW)                          # [m] of [QPK S, 1]
    en   = Map(Map(sx, mxn, fn=sub, compute_bw=BW), fn=exp, compute_bw=BW)
    numn = Map(en, vn, fn=matmul, dtype=f32, compute_bw=BW)            # [m] of [QPK S, D]
    denn = Map(en, fn=row_sum, dtype=f32, compute_bw=BW)

    # both parts rescaled to their common row max
    mx   = Map(mxc, mxn, fn=max, compute_bw=BW)
    ac   = Map(Map(mxc, mx, fn=sub, compute_bw=BW), fn=exp, compute_bw=BW)
    an   = Map(Map(mxn, mx, fn=sub, compute_bw=BW), fn=exp, compute_bw=BW)
    numa = Map(numc, ac, fn=mul, compute_bw=BW)
    numb = Map(numn, an, fn=mul, compute_bw=BW)
    num  = Map(numa, numb, fn=add, compute_bw=BW)
    dena = Map(denc, ac, fn=mul, compute_bw=BW)
    denb = Map(denn, an, fn=mul, compute_bw=BW)
    den  = Map(dena, denb, fn=add, compute_bw=BW)
    att  = Map(num, den, fn=div, dtype=$dt, compute_bw=BW)             # [m] of [QPK S, D]

    # o_proj: head h's [S, HEAD_DIM] rows times its [HID, HEAD_DIM] slice of WO, summed over heads
    hrow = Reshape(FlatMap(att, fn=retile_streamify), chunk=S)         # [n H, S] of [1, HEAD_DIM]
    rows = Reshape(Accum(hrow, fn=retile_row, rank=1), chunk=H)        # [n, H] of [S, HEAD_DIM]
    wo   = LinearOffChipLoad(WO, ref=x, tile=[HID, HEAD_DIM], shape=[H], stride=[1])
    acc  = Accum(rows, wo, fn=matmul(transpose=true), rank=1, dtype=$dt, compute_bw=BW)
$bias_o    return RandomOffChipStore(bidx, $out, O, depth=[16, 2]), sig
}
"""
