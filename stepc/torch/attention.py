"""Lowering of decode attention over a ragged KV cache.

The block is recognised as a whole in the captured graph (examples/torch/decode_attention.py):
queries `q [B, QPK, HEAD_DIM]` (one GQA group per request), new key/value rows `[B, HEAD_DIM]`
appended at row `kv_lens[b]` of the caches `[B, MAXN, HEAD_DIM]` (`where(arange == len, ...)`),
and the paper's simplified softmax over the rows `arange <= len`:
`einsum(exp(einsum(q, k)) * mask, v) / sum(exp(einsum(q, k)) * mask)`.

It is emitted as the paper's attention programs (programs/attention_interleaved.step,
attention_coarse.step, attention_dynamic.step with programs/lib/attention.step inlined): the
per-request KV length is the dynamic dim of the external stream `kv_lens`, and each request
reads only its ceil((len + 1) / TILE_N) KV tiles. The parallelisation over R regions is the
lowering choice: static interleaved, static coarse-grained blocks, or dynamic dispatch.
"""

from __future__ import annotations

from string import Template

import numpy as np
import torch

from stepc.torch.capture import LoweringError, Node
from stepc.torch.emit import StepWriter

ATTENTION_TILINGS = ("interleaved", "coarse", "dynamic")
# defaults: the paper's evaluation settings (experiments.md 6)
ATTENTION_DEFAULTS = {"interleaved": {"R": 4, "TILE_N": 32, "BW": 2048},
             "coarse": {"R": 4, "NB": 16, "TILE_N": 32, "BW": 2048},
             "dynamic": {"R": 4, "TILE_N": 32, "BW": 2048}}
_ALLOWED = {"input", "output", "arange", "unsqueeze", "view", "reshape", "expand", "eq", "le",
            "where", "einsum", "exp", "mul", "sum", "div", "to", "_to_copy"}
_PASS = {"unsqueeze", "view", "reshape", "expand", "to", "_to_copy"}  # shape or dtype only
_FORM = ("expected decode attention as in examples/torch/decode_attention.py: k = where(arange "
         "== kv_lens, k_new, k_cache) (and v), e = exp(einsum(q, k)) * (arange <= kv_lens), "
         "out = einsum(e, v) / e.sum(-1)")


def is_attention(nodes: list[Node]) -> bool:
    """A block with an exp and a rank-1 integer input (the KV lengths)."""
    return (any(n.op == "exp" for n in nodes)
            and any(n.op == "input" and len(n.shape) == 1 and n.dtype in ("u64", "i32")
                    for n in nodes))


def _strip(n):
    while isinstance(n, Node) and n.op in _PASS:
        n = n.args[0]
    return n


def _expect(cond: bool, where: Node, what: str) -> None:
    if not cond:
        raise LoweringError(f"decode attention in {where.site}: {what}; {_FORM}")


def _einsum_is(n: Node, lhs_same: tuple[int, int], out: str) -> bool:
    """`n` is a batched einsum "xyz,x?? -> ..." whose operands share their first letter and
    whose output keeps the letters named by `out` ("ab" = a of operand 0, b of operand 1...)."""
    if n.op != "einsum" or not isinstance(n.args[0], str):
        return False
    ins, _, res = n.args[0].replace(" ", "").partition("->")
    a, _, b = ins.partition(",")
    if (len(n.args) != 2 or len(n.args[1]) != 2 or len(a) != 3 or len(b) != 3
            or len(res) != 3 or a[0] != b[0] or res[0] != a[0]):
        return False
    i, j = lhs_same
    return a[i] == b[j] and a[i] not in res and res[1:] == out.format(a=a, b=b)


def _recognise(nodes: list[Node]) -> dict:
    for n in nodes:
        if n.op not in _ALLOWED:
            raise LoweringError(f"unsupported operator aten.{n.op} ({n.target}) in {n.site}: a "
                                "block with an exp and KV lengths is lowered as a whole decode-"
                                "attention block, and this operator is not part of it")
    out = next(n for n in nodes if n.op == "output")
    _expect(len(out.args) == 1, out, "the block returns one tensor")
    div = _strip(out.args[0])
    _expect(div.op == "div" and len(div.args) == 2, div, "the output is a division")
    num, den = _strip(div.args[0]), _strip(div.args[1])
    _expect(num.op == "einsum" and den.op == "sum", div, "it divides an einsum by a sum")
    _expect(len(den.args) >= 3 and list(den.args[1]) in ([-1], [2]) and den.args[2] is True, den,
            "the denominator sums the last dim, keepdim=True")
    _expect(_einsum_is(num, (2, 1), "{a[1]}{b[2]}"), num, "the numerator is einsum('bhn,bnd->bhd')")
    e, v = (_strip(a) for a in num.args[1])
    _expect(_strip(den.args[0]) is e and e.op == "mul", den, "numerator and denominator use "
            "the same masked exp")
    ex, mask = (_strip(a) for a in e.args)
    if mask.op == "exp":
        ex, mask = mask, ex
    _expect(ex.op == "exp" and mask.op == "le", e, "exp(scores) is multiplied by a mask")
    score = _strip(ex.args[0])
    _expect(_einsum_is(score, (2, 2), "{a[1]}{b[1]}"), score,
            "the scores are einsum('bhd,bnd->bhn', q, k) with no scale (fold it into q)")
    q, k = (_strip(a) for a in score.args[1])
    pos, lens = (_strip(a) for a in mask.args)
    _expect(pos.op == "arange" and lens.op == "input", mask, "the mask is arange <= kv_lens")
    kv = {}
    for role, node in (("k", k), ("v", v)):
        _expect(node.op == "where" and len(node.args) == 3, node,
                f"{role} appends the new row with torch.where")
        cond, new, cache = (_strip(a) for a in node.args)
        _expect(cond.op == "eq" and {_strip(a).op for a in cond.args} == {"arange", "input"}
                and any(_strip(a) is lens for a in cond.args), cond,
                f"{role}'s new row goes in at row kv_lens (arange == kv_lens)")
        _expect(new.op == "input" and cache.op == "input" and len(cache.shape) == 3
                and len(new.shape) == 2, node, f"{role}_new and {role}_cache are inputs")
        kv[role] = (new, cache)
    _expect(q.op == "input" and len(q.shape) == 3, score, "q is an input [B, QPK, HEAD_DIM]")
    (kn, kc), (vn, vc) = kv["k"], kv["v"]
    b, qpk, d = q.shape
    maxn = kc.shape[1]
    for t, want in ((kn, (b, d)), (vn, (b, d)), (kc, (b, maxn, d)), (vc, (b, maxn, d)),
                    (lens, (b,))):
        if t.shape != want:
            raise LoweringError(f"decode attention: `{t.name}` is {list(t.shape)}, expected "
                                f"{list(want)} for q {list(q.shape)} and a cache of {maxn} rows")
    if len({t.dtype for t in (q, kn, vn, kc, vc)}) != 1 or q.dtype not in ("bf16", "f32"):
        raise LoweringError("decode attention: q, the new rows and the caches need one dtype, "
                            "bf16 or f32 (found "
                            f"{', '.join(t.dtype for t in (q, kn, vn, kc, vc))})")
    return {"q": q, "k_new": kn, "v_new": vn, "k_cache": kc, "v_cache": vc, "kv_lens": lens,
            "B": b, "QPK": qpk, "HEAD_DIM": d, "MAXN": maxn, "dtype": q.dtype,
            "line": score.site.line or "forward"}


class AttentionLayout:
    """The program's tensor values and `kv_lens` trace from the module's forward arguments:
    queries and caches flattened to the program's row-major 2-D tensors (for the coarse
    tiling, each region's requests gathered into its slice)."""

    def __init__(self, roles: dict[str, str], tiling: str, params: dict):
        self.roles, self.tiling, self.params = roles, tiling, params  # role -> program tensor

    def values(self, args: dict[str, torch.Tensor], names: dict[str, str]
               ) -> dict[str, np.ndarray]:
        """`names`: role (q, k_new, ...) -> forward argument name."""
        p = self.params
        arr = {r: args[a].detach().to("cpu", torch.float32).numpy() for r, a in names.items()
               if r != "kv_lens"}
        out = {self.roles["k_cache"]: arr["k_cache"].reshape(-1, p["HEAD_DIM"]),
               self.roles["v_cache"]: arr["v_cache"].reshape(-1, p["HEAD_DIM"])}
        rows = {"q": arr["q"], "k_new": arr["k_new"][:, None, :], "v_new": arr["v_new"][:, None, :]}
        for role, a in rows.items():
            if self.tiling == "coarse":
                a = coarse_regions(a, self.params)
            out[self.roles[role]] = a.reshape(*a.shape[:-3], -1, p["HEAD_DIM"])
        return out

    def seeded_lens(self, b: int, gen: torch.Generator) -> torch.Tensor:
        """B seeded KV lengths len < MAXN with len + 1 a multiple of TILE_N."""
        tiles = self.params["MAXN"] // self.params["TILE_N"]
        return torch.randint(1, tiles + 1, (b,), generator=gen) * self.params["TILE_N"] - 1



def coarse_regions(a: np.ndarray, params: dict) -> np.ndarray:
    """[B, ...] -> [R, BPR * NB, ...] for the coarse schedule: row k NB + j of slice r is
    request (k R + r) NB + j (zeros past the batch)."""
    r, nb, bpr = params["R"], params["NB"], params["BPR"]
    out = np.zeros((r, bpr * nb, *a.shape[1:]), dtype=a.dtype)
    for reg in range(r):
        for k in range(bpr):
            first = (k * r + reg) * nb
            if first < a.shape[0]:
                out[reg, k * nb:(k + 1) * nb] = a[first:first + nb]
    return out


def check_regions(tiling: str, b: int, r: int, params: dict) -> None:
    """Refuse a batch of B requests that the tiling cannot deal over R regions."""
    if tiling == "dynamic" and (b % r or b <= r):
        raise LoweringError(f"dynamic tiling needs B = {b} a multiple of R = {r} and B > R")
    if tiling == "coarse":
        nb = params["NB"]
        if nb < 1 or b % nb or b // nb < r:
            raise LoweringError(f"coarse tiling needs B = {b} a multiple of NB = {nb} with at "
                                f"least R = {r} blocks")


def lower_attention(nodes: list[Node], w: StepWriter, tiling: str, sched: dict
                    ) -> tuple[dict[str, str], AttentionLayout, dict[str, str]]:
    """Emit the decode-attention block under `tiling`. Returns the tensors' sources, the
    layout of their values, and role -> forward argument name."""
    m = _recognise(nodes)
    params = dict(ATTENTION_DEFAULTS[tiling])
    unknown = sorted(set(sched) - set(params))
    if unknown:
        raise LoweringError(f"unknown schedule setting {', '.join(unknown)} for {tiling} "
                            f"tiling of decode attention (it takes {', '.join(params)})")
    params.update(sched)
    b, r, tn, maxn = m["B"], params["R"], params["TILE_N"], m["MAXN"]
    if r < 1 or tn < 1 or maxn % tn:
        raise LoweringError(f"TILE_N = {tn} must divide the cache's {maxn} rows (and R >= 1)")
    check_regions(tiling, b, r, params)
    dt = m["dtype"]
    roles = {role: w.name(m[role].name.upper()) for role in
             ("q", "k_new", "v_new", "k_cache", "v_cache")}
    w.taken |= {"O", "IDX", "INIT", "ONE", "kv_lens", "free", "sig", "ids"}
    w.header += _HEADER[tiling] + [
        "",
        f"One decode step of B requests ({m['line']}), each one GQA group of QPK",
        "query heads sharing one KV head of HEAD_DIM: the request's [QPK, HEAD_DIM] query",
        "attends over its KV cache (len cached rows read in [TILE_N, HEAD_DIM] tiles from its",
        "slot of the cache) plus the new key/value row, appended to the last KV tile and",
        "written back. The paper's simplified softmax (no max subtraction):",
        "  out = (sum_j exp(q k_j^T) v_j) / (sum_j exp(q k_j^T))",
        "The ragged KV lengths are the external stream kv_lens (--trace kv_lens=PATH, int [B],",
        "the module's forward argument `" + m["kv_lens"].name + "`); every len must be < MAXN.",
        "Exact math needs len + 1 to be a multiple of TILE_N: the rows of the last tile past",
        "the appended row are not masked (see the graph kv_append). Timing and traffic do",
        "not depend on it.",
    ]
    sizes = (("B", b, "requests in the batch"), ("R", r, "parallel regions"),
             ("NB", params.get("NB"), "requests per block; block b runs on region b mod R"),
             ("HEAD_DIM", m["HEAD_DIM"], "head dim"),
             ("QPK", m["QPK"], "query heads per KV head"), ("TILE_N", tn, "KV rows per tile"),
             ("MAXN", maxn, "KV slot size in tokens (rows per request in the caches)"),
             ("BW", params["BW"], "FLOPs/cycle of each compute operator"),
             ("RO", "MAXN // TILE_N", ""))
    for name, value, doc in sizes:
        if value is not None:
            w.param(name, value, doc)
    layout_params = {**params, "HEAD_DIM": m["HEAD_DIM"], "MAXN": maxn}
    if tiling == "coarse":
        w.param("NBLK", "B // NB", "blocks")
        w.param("BPR", "ceildiv(NBLK, R)", "blocks of region 0, the most any region has")
        layout_params["BPR"] = -(-(b // params["NB"]) // r)
    subst = {"dt": dt, "O": "O", "Q": roles["q"], "KN": roles["k_new"], "VN": roles["v_new"],
             "K": roles["k_cache"], "V": roles["v_cache"],
             "mean": min(1024, maxn // 4), "std": min(512, maxn // 8)}
    decls = [(role, Template(ty).substitute(subst), kind) for role, ty, kind in _TENSORS[tiling]]
    width = max(len(ty) for _, ty, _ in decls)
    for role, ty, kind in decls:
        name = roles.get(role, role)
        src = m[role] if role in m else None
        w.tensor(name, f"{ty.ljust(width)} {kind}",
                 f"forward argument `{src.name}`" if src is not None else _TENSOR_DOCS[role])
    body = Template(_LIB + _BODY[tiling]).substitute(subst)
    w.graph(body)
    tensors = {name: m[role].name for role, name in roles.items()}
    tensors["O"] = "output"
    names = {role: m[role].name for role in roles} | {"kv_lens": m["kv_lens"].name}
    return tensors, AttentionLayout(roles, tiling, layout_params), names


_HEADER = {
    "interleaved": ["Decode attention with STATIC INTERLEAVED parallelisation: request i runs on",
                    "region i mod R (as programs/attention_interleaved.step). Parallelize deals",
                    "the requests round-robin with blocking sends."],
    "coarse": ["Decode attention with STATIC COARSE-GRAINED parallelisation: blocks of NB",
               "consecutive requests, block b on region b mod R (as",
               "programs/attention_coarse.step). Region r reads its own slices of the queries",
               "and new rows: row k NB + j of slice r is request (k R + r) NB + j."],
    "dynamic": ["Decode attention with DYNAMIC parallelisation: each request goes to whichever",
                "of the R regions frees up first (as programs/attention_dynamic.step, the",
                "paper's Figure 16 dispatch loop)."],
}

_TENSOR_DOCS = {"IDX": "request slots", "INIT": "round-robin start 0 .. R-1",
                "ONE": "the constant 1", "O": "the block's output"}

_ROWS = [("q", "$dt[B * QPK, HEAD_DIM]", "input"), ("k_new", "$dt[B, HEAD_DIM]", "input"),
         ("v_new", "$dt[B, HEAD_DIM]", "input"), ("k_cache", "$dt[B * MAXN, HEAD_DIM]", "scratch"),
         ("v_cache", "$dt[B * MAXN, HEAD_DIM]", "scratch"), ("IDX", "u64[B]", "input = arange")]
_OUT = [("O", "$dt[B * QPK, HEAD_DIM]", "output")]
_TENSORS = {
    "interleaved": _ROWS + _OUT,
    "dynamic": _ROWS + [("INIT", "u64[1, R]", "input = arange"),
                        ("ONE", "u64[1]", "input = ones")] + _OUT,
    "coarse": [("q", "$dt[R, BPR * NB * QPK, HEAD_DIM]", "input"),
               ("k_new", "$dt[R, BPR * NB, HEAD_DIM]", "input"),
               ("v_new", "$dt[R, BPR * NB, HEAD_DIM]", "input"),
               ("k_cache", "$dt[B * MAXN, HEAD_DIM]", "scratch"),
               ("v_cache", "$dt[B * MAXN, HEAD_DIM]", "scratch"),
               ("IDX", "u64[BPR, R, NB]", "input = arange"), ("ONE", "u64[1]", "input = ones"),
               ("O", "$dt[B * QPK, HEAD_DIM]", "output")],
}

# programs/lib/attention.step: the KV-cache read and the append of the new row (also used by
# stepc.torch.hf_attention), then one region
KV_LIB = """
stream kv_lens : Strm<Tile<u64, [1, 1]>, 0>[B] = external("kv_lens", mean=$mean, std=$std)

# The raw KV tiles of each request ([n, L] of [TILE_N, HEAD_DIM], L = its ntiles).
graph kv_load(idx, ntiles, C) {
    addr = FlatMap(Zip(idx, ntiles, depth=16), fn=cache_read_addr(row_offset=RO))
    return RandomOffChipLoad(addr, C, tile=[TILE_N, HEAD_DIM])
}

# Append each request's new row to its last KV tile, write that tile back to the cache, and
# return the request's tiles [n, L] with the updated last tile in place (the rows past the
# appended row keep what the cache holds).
graph kv_append(raw, idx, ntiles, off, new, C) {
    last = FlatMap(ntiles, fn=filter_last_tile, depth=16)        # [n, L]: {1} .. {1} {0}
    assume shape(last) == shape(raw)
    part = Partition(raw, last, rank=0, consumers=2, dim="t")    # [t_0] last tiles, [t_1] others
    assume shape(part[0]) == shape(off)                          # one last tile per request
    tile = Map(part[0], off, fn=set_offset, depth=[2, 16])       # valid rows = len mod TILE_N
    app = Map(tile, new, fn=row_append)                          # + the new row
    lastidx = Map(ntiles, fn=ceildiv_int(by=1, plus=-1), depth=16)
    waddr = Map(idx, lastidx, fn=cache_write_addr(row_offset=RO), depth=[16, 2])
    ack = RandomOffChipStore(waddr, app, C, buffer_depth=4, depth=[2, 4])
    Sink(ack)
    full = Reassemble([app, part[1]], last, rank=0)  # [n, L, 1]
    assume dim(full, 0) == 1
    return Flatten(full, min=0, max=1)  # [n, L]
}
"""
_LIB = KV_LIB + """
# One region: q [n, 1] of [QPK, HEAD_DIM]; knew, vnew [n] of [1, HEAD_DIM]; idx, ntiles,
# off [n]; kraw its K-cache load. Stores each request's output at tile idx of O.
graph attention_region(q, knew, vnew, idx, ntiles, off, kraw) {
    k    = kv_append(kraw, idx, ntiles, off, knew, $K)  # [n, L]
    vraw = kv_load(idx, ntiles, $V)
    v    = kv_append(vraw, idx, ntiles, off, vnew, $V)
    assume shape(v) == shape(k)  # the same lengths
    qe   = Expand(q, ref=k)  # q once per KV tile
    s    = Map(qe, k, fn=matmul(transpose=true), compute_bw=BW)  # [n, L] of [QPK, TILE_N]
    e    = Map(s, fn=exp, compute_bw=BW)
    num  = Accum(e, v, fn=matmul, rank=1, dtype=f32, compute_bw=BW)  # [n] of [QPK, HEAD_DIM]
    es   = Accum(e, fn=add, rank=1, dtype=f32, compute_bw=BW)  # [n] of [QPK, TILE_N]
    den  = Map(es, fn=row_sum, compute_bw=BW)  # [n] of [QPK, 1]
    out  = Map(num, den, fn=div, write_back=true, dtype=$dt, compute_bw=BW)
    return RandomOffChipStore(idx, out, $O, depth=[16, 2])
}
"""

# per-request metadata: ntiles = ceil((len + 1) / TILE_N), off = len mod TILE_N
_META = """
# Metadata: ntiles = ceil((len + 1) / TILE_N) KV tiles, off = len mod TILE_N.
ntiles  = Map($lens, fn=ceildiv_int(by=TILE_N, plus=1))
lastrow = Map($lens, fn=ceildiv_int(by=TILE_N, plus=1 - TILE_N))          # floor(len / TILE_N)
off     = Map(lastrow, $lens, fn=cache_write_addr(row_offset=-TILE_N))
"""

_LOADS = """idx     = MetadataGen(IDX)

q  = LinearOffChipLoad($Q, tile=[QPK, HEAD_DIM])                # [B, 1] of [QPK, HEAD_DIM]
kn = LinearOffChipLoad($KN, tile=[1, HEAD_DIM], shape=[B])      # [B] of [1, HEAD_DIM]
vn = LinearOffChipLoad($VN, tile=[1, HEAD_DIM], shape=[B])
"""

# the coarse tiling's request ids of region r (also used by stepc.torch.hf_attention)
REGION_IDS = """
# Region r's global request ids, [n * NB]: the ids of its n blocks, one MetadataGen each.
graph region_ids(r, n) {
    ids[0] = MetadataGen(IDX[0][r])                                     # [NB]
    for k in 1..n {
        cnt = Map(MetadataGen(ONE), fn=ceildiv_int(by=1, plus=k))       # the constant k + 1
        sel = Flatten(FlatMap(cnt, fn=filter_last_tile), min=0, max=1)  # {1} x k, {0}
        assume shape(sel) == [k + 1]
        prev = Reshape(ids[k - 1], chunk=NB)                            # [k, NB]: blocks 0 .. k-1
        blk  = Promote(MetadataGen(IDX[k][r]))                          # [1, NB]: block k
        cat  = Reassemble([blk, prev], sel, rank=1)                     # [k + 1, c, NB]
        assume dim(cat, 1) == 1                                         # one chunk per selector
        ids[k] = Flatten(cat, min=0, max=2)                             # [(k + 1) * NB]
    }
    return ids[n - 1]
}
"""

_BODY = {
    "interleaved": Template(_META).safe_substitute(lens="kv_lens") + _LOADS + """
pq = Parallelize(q, consumers=R, rank=1)                       # pq[r]: [ceil((B - r)/R), 1]
pk = Parallelize(kn, consumers=R)
pv = Parallelize(vn, consumers=R)
pi = Parallelize(idx, consumers=R)
pn = Parallelize(ntiles, consumers=R)
po = Parallelize(off, consumers=R)

for r in 0..R {
    kraw = kv_load(pi[r], pn[r], $K)
    reg  = attention_region(pq[r], pk[r], pv[r], pi[r], pn[r], po[r], kraw)
    Sink(reg)
}
""",
    "dynamic": """
stream free : Strm<MultiHot<R>, 0>[B]                          # the region each request goes to
""" + Template(_META).safe_substitute(lens="kv_lens") + _LOADS + """
# 1. Route each request by `free`; all six Partitions share the counts n_r.
pq = Partition(q, free, rank=1, consumers=R, dim="n")          # pq[r]: [n_r, 1]
pk = Partition(kn, free, rank=0, consumers=R, dim="n")         # pk[r]: [n_r]
pv = Partition(vn, free, rank=0, consumers=R, dim="n")
pi = Partition(idx, free, rank=0, consumers=R, dim="n")
pn = Partition(ntiles, free, rank=0, consumers=R, dim="n")
po = Partition(off, free, rank=0, consumers=R, dim="n")

for r in 0..R {
    kraw   = kv_load(pi[r], pn[r], $K)                          # [n_r, L]
    sig[r] = Accum(kraw, fn=signal_req_all_read, rank=1)        # 2. [n_r]: K cache read
    reg    = attention_region(pq[r], pk[r], pv[r], pi[r], pn[r], po[r], kraw)
    Sink(reg)
}

# 3. Which region freed up, in order; keep the first B - R selectors.
done, who = EagerMerge(sig)                                    # [n_0 + .. + n_{R-1}]
assume shape(who) == [B]                                       # every request signals once
Sink(done)
nchunks = Map(MetadataGen(ONE), fn=ceildiv_int(by=1, plus=B // R - 1))   # the constant B / R
keep    = Flatten(FlatMap(nchunks, fn=filter_last_tile), min=0, max=1)   # {1} x (B/R - 1), {0}
assume shape(keep) == [B // R]
kp = Partition(Reshape(who, chunk=R), keep, rank=1, consumers=2, dim="c")
assume shape(kp[1]) == [B // R - 1, R]                         # kept: the first B - R
assume shape(kp[0]) == [1, R]                                  # dropped: the last R
Sink(kp[0])

# 4. The first R requests round-robin, then the kept selectors. 5. Close the loop.
init   = SelectGen(INIT, n=R, onehot=true)                     # [1, R]: {0} {1} .. {R-1}
sel, _ = EagerMerge([init, kp[1]], rank=1)                     # [B / R, R]
free   = Flatten(sel, min=0, max=1)                            # [B]
""",
    "coarse": REGION_IDS + """
blocks = Parallelize(Reshape(kv_lens, chunk=NB), consumers=R, rank=1)  # blocks[r]: [n_r, NB]

for r in 0..R {
    n  = ceildiv(NBLK - r, R)                                  # region r's blocks
    nr = n * NB                                                # and requests
    lens = Flatten(blocks[r], min=0, max=1, depth=nr)          # [nr]: region r's lengths
""" + "\n".join("    " + ln if ln else ln for ln in
                Template(_META).safe_substitute(lens="lens").strip("\n").split("\n")) + """
    idx     = region_ids(r, n)                                 # [nr]
    assume shape(idx) == [nr]

    q  = LinearOffChipLoad($Q[r], tile=[QPK, HEAD_DIM], shape=[nr, 1])
    kn = LinearOffChipLoad($KN[r], tile=[1, HEAD_DIM], shape=[nr])
    vn = LinearOffChipLoad($VN[r], tile=[1, HEAD_DIM], shape=[nr])

    kraw = kv_load(idx, ntiles, $K)
    reg  = attention_region(q, kn, vn, idx, ntiles, off, kraw)
    Sink(reg)
}
""",
}
