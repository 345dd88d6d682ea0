"""Lowering of a top-k routed Mixture-of-Experts block with SwiGLU experts.

The block is recognised as a whole in the captured graph: a router (a linear layer, a
softmax, `topk`, normalised weights scattered into a routing matrix), the SwiGLU experts as
three stacked parameters `[E, D, F]`, `[E, D, F]`, `[E, F, D]` (einsums over every expert)
and the weighted combine. It is emitted in the routed form of the paper's MoE programs
(programs/moe_static.step, moe_dynamic.step, moe_timemux.step): Partition of the tokens by
the top-k selector, a loop over the experts each running one SwiGLU graph, and Reassemble +
Accum of the weighted expert outputs. As in those programs the router's decisions enter as
the external stream `routing` (top-k expert ids) and the input tensor of routing weights,
which `TorchProgram.traces` / `values` compute by running the module's own router.

`emit_moe` writes that program from a `MoeSpec` (sizes, tensor names and sources), for the
captured block here and for transformers' MoE blocks (stepc/torch/hf_moe.py), whose shared
expert (with its optional sigmoid gate) it adds to the routed sum, tiled like the routed
experts' tokens.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

import torch

from stepc.torch import families
from stepc.torch.capture import LoweringError, Node
from stepc.torch.emit import StepWriter

MOE_TILINGS = families.MOE_TILINGS
ROUTER_AHEAD = ("it runs ahead of the program, as in the paper's MoE programs: its expert "
                "ids are the `routing` trace and its routing weights the input RW "
                "(TorchProgram.traces / values compute both).")
ROUTING_WEIGHTS = "routing weights"  # the source of the RW tensor, which the router computes
# defaults per tiling: the paper's evaluation settings (experiments.md 4.2 and 5)
_DEFAULTS = {"static": {"TILE_N": 16, "TILE_F": 64, "BW": 4096},
             "dynamic": {"TILE_F": 64, "BW": 6400, "PACK_BW": 1024},
             "timemux": {"R": 32, "TILE_N": 32, "TILE_F": 48, "BW": 1024}}
_ALLOWED = {"input", "param", "output", "linear", "softmax", "_softmax", "topk", "getitem",
            "sum", "div", "to", "_to_copy", "zeros_like", "zeros", "new_zeros", "scatter",
            "einsum", "silu", "mul"}


class RoutingProbe:
    """Runs the module's router on real inputs: the top-k ids and the routing weights that
    its combine uses (the index and source of the scatter into the routing matrix)."""

    weights_tensor = "RW"

    def __init__(self, module: torch.nn.Module, ids_node: str, weights_node: str):
        self.module, self.ids_node, self.weights_node = module, ids_node, weights_node

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        from torch import fx
        gm = torch.export.export(self.module, tuple(inputs)).module()
        seen: dict[str, torch.Tensor] = {}
        want = {self.ids_node, self.weights_node}

        class Probe(fx.Interpreter):
            def run_node(self, n):
                r = super().run_node(n)
                if n.name in want:
                    seen[n.name] = r
                return r

        with torch.no_grad():
            Probe(gm).run(*inputs)
        if want - set(seen):
            raise LoweringError("the router's top-k values were not found when running the "
                                "module (its graph changed with the inputs)")
        return seen[self.ids_node], seen[self.weights_node]

    def values(self, *inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        """The program tensors the router supplies for these inputs: the routing weights."""
        return {self.weights_tensor: self(*inputs)[1]}

    @staticmethod
    def forward_args(inputs: tuple) -> tuple:
        """The forward arguments whose output the program computes: these."""
        return inputs

    def on_module(self, module: torch.nn.Module) -> RoutingProbe:
        """The same probe on another module of the same class."""
        return RoutingProbe(module, self.ids_node, self.weights_node)


def _users(n: Node, op: str) -> list[Node]:
    return [u for u in n.users if u.op == op]


def _recognise(nodes: list[Node]) -> dict:
    for n in nodes:
        if n.op not in _ALLOWED:
            raise LoweringError(f"unsupported operator aten.{n.op} ({n.target}) in {n.site}: a "
                                "block with top-k routing is lowered as a whole MoE block "
                                "(router, top-k, SwiGLU experts, weighted combine), and this "
                                "operator is not part of it")
    topk = next(n for n in nodes if n.op == "topk")
    scatter = [n for n in nodes if n.op == "scatter"]
    if len(scatter) != 1 or len(scatter[0].args) < 4:
        raise LoweringError(f"top-k in {topk.site}: expected its weights scattered into one "
                            "[B, E] routing matrix (zeros(...).scatter(1, ids, weights))")
    scatter = scatter[0]
    router = topk.args[0]
    while isinstance(router, Node) and router.op != "linear":
        router = router.args[0] if router.args else None
    if router is None or router.args[1].op != "param":
        raise LoweringError(f"top-k in {topk.site}: no router linear layer feeds it")
    experts = [n for n in nodes if n.op == "param" and len(n.shape) == 3]
    silu = [n for n in nodes if n.op == "silu"]
    if len(silu) != 1 or len(experts) != 3:
        raise LoweringError(f"top-k in {topk.site}: expected SwiGLU experts, three stacked "
                            f"parameters and one silu (found {len(experts)} and {len(silu)})")
    ein_of = {p.name: _users(p, "einsum") for p in experts}
    gate = next((p for p in experts if any(silu[0].args[0] is e for e in ein_of[p.name])), None)
    mul = _users(silu[0], "mul")
    down = next((p for p in experts if mul and any(e.args[1][0] is mul[0]
                                                   for e in ein_of[p.name])), None)
    up = next((p for p in experts if p is not gate and p is not down), None)
    if gate is None or down is None or up is None:
        raise LoweringError(f"top-k in {topk.site}: the experts are not silu(x Wg) * (x Wu) "
                            "times Wd")
    e, d, f = gate.shape
    if up.shape != (e, d, f) or down.shape != (e, f, d):
        raise LoweringError(f"experts in {gate.site}: expected gate/up [E, D, F] and down "
                            f"[E, F, D], found {list(gate.shape)}, {list(up.shape)}, "
                            f"{list(down.shape)}")
    x = [n for n in nodes if n.op == "input"]
    if len(x) != 1 or len(x[0].shape) != 2 or x[0].shape[1] != d:
        raise LoweringError(f"a MoE block takes one [B, {d}] input")
    return {"x": x[0], "router": router, "topk": topk, "scatter": scatter, "gate": gate,
            "up": up, "down": down, "E": e, "D": d, "F": f, "K": int(topk.args[1]),
            "B": x[0].shape[0]}


def lower_moe(nodes: list[Node], w: StepWriter, tiling: str, sched: dict
              ) -> tuple[dict[str, str], tuple[str, str]]:
    """Emit the captured MoE block under `tiling`; returns the tensors' sources and the names
    of the captured nodes holding the top-k ids and routing weights (for a RoutingProbe)."""
    m = _recognise(nodes)
    x = m["x"]
    spec = MoeSpec(
        B=m["B"], D=m["D"], F=m["F"], E=m["E"], K=m["K"], dtype=x.dtype,
        x=MoeTensor(x.name.upper(), x.name, f"forward argument `{x.name}`"),
        experts={k: MoeTensor(m[k].target.replace(".", "_"), m[k].target,
                              f"{m[k].target} ({m[k].site.line or 'parameter'})")
                 for k in ("up", "gate", "down")},
        about=[(f"Router: {m['router'].site} (top-{m['K']} at "
                f"{m['topk'].site.line or 'forward'}); {ROUTER_AHEAD}"),
               (f"Experts: {m['gate'].target} / {m['up'].target} / {m['down'].target} "
                f"({m['gate'].site.line or 'forward'}).")],
        combine=m["scatter"].site.line or "forward")
    tensors = emit_moe(w, spec, tiling, sched)
    scatter = m["scatter"]
    return tensors, (scatter.args[2].name, scatter.args[3].name)


@dataclass
class MoeTensor:
    """One tensor of the emitted program: its name's base, where its values come from (a
    state-dict key, a forward argument, or how they are derived), and its comment."""

    name: str
    source: str
    comment: str


@dataclass
class SharedExpert:
    """A SwiGLU expert every token goes through (DeepSeek's `shared_experts`, Qwen2-MoE's
    `shared_expert`), with its optional per-token sigmoid gate (a [D, 1] weight)."""

    F: int
    weights: dict[str, MoeTensor]  # "up", "gate", "down": [D, F], [D, F], [F, D]
    gate: MoeTensor | None
    about: str


@dataclass
class MoeSpec:
    """What the emitter needs to know about a routed SwiGLU MoE block."""

    B: int
    D: int
    F: int
    E: int
    K: int
    dtype: str
    x: MoeTensor
    experts: dict[str, MoeTensor]  # "up", "gate", "down": [E, D, F], [E, D, F], [E, F, D]
    about: list[str]               # header paragraphs: the router and the experts
    combine: str                   # where the module combines the expert outputs
    shared: SharedExpert | None = None


def moe_params(spec: MoeSpec, tiling: str, sched: dict) -> dict:
    """The tiling's params: its defaults fitted to the block, then the user's settings."""
    params = {**_DEFAULTS[tiling]}
    unknown = sorted(set(sched) - set(params))
    if unknown:
        raise LoweringError(f"unknown schedule setting {', '.join(unknown)} for {tiling} "
                            f"tiling (it takes {', '.join(params)})")
    widths = [spec.F] + ([spec.shared.F] if spec.shared else [])
    width = math.gcd(*widths)
    if "TILE_F" not in sched and width % params["TILE_F"]:
        params["TILE_F"] = next(t for t in range(params["TILE_F"], 0, -1) if width % t == 0)
    if tiling == "timemux" and "R" not in sched and spec.E % params["R"]:
        params["R"] = next(r for r in range(min(params["R"], spec.E), 0, -1) if spec.E % r == 0)
    params.update(sched)
    for f, what in zip(widths, ("F", "the shared expert's FS")):
        if f % params["TILE_F"]:
            raise LoweringError(f"TILE_F = {params['TILE_F']} does not divide {what} = {f}")
    if tiling == "timemux" and spec.E % params["R"]:
        raise LoweringError(f"R = {params['R']} regions do not divide E = {spec.E} experts")
    return params


def emit_moe(w: StepWriter, spec: MoeSpec, tiling: str, sched: dict) -> dict[str, str]:
    """Write the routed MoE program for `spec` under `tiling`; returns the program's tensors
    and their sources."""
    params = moe_params(spec, tiling, sched)
    dt, shared = spec.dtype, spec.shared
    X = w.name(spec.x.name)
    names = {k: w.name(t.name) for k, t in spec.experts.items()}
    about = spec.about + ([shared.about] if shared else [])
    w.header += _HEADER[tiling] + [""] + [ln for para in about for ln in textwrap.wrap(para, 86)]
    for k, v, c in (("B", spec.B, "tokens"), ("D", spec.D, "hidden size"),
                    ("F", spec.F, "expert intermediate size"), ("E", spec.E, "experts"),
                    ("K", spec.K, "experts per token")):
        w.param(k, v, c)
    if shared:
        w.param("FS", shared.F, "shared expert intermediate size")
    docs = {"TILE_N": "token rows per tile", "TILE_F": "intermediate columns per weight tile",
            "BW": "FLOPs/cycle of each compute operator",
            "PACK_BW": "FLOPs/cycle of the row-packing Accum",
            "R": "time-multiplexed regions (E must be a multiple of R)"}
    for k, v in params.items():
        w.param(k, v, docs[k])
    if tiling == "timemux":
        w.param("G", "E // R", "experts per region")
    w.param("NF", "F // TILE_F")
    if shared:
        w.param("NFS", "FS // TILE_F")
    w.taken |= {"RW", "Y", "route", "wsel", "merge"}
    w.tensor(X, f"{dt}[B, D]    input  = random(seed=5)", spec.x.comment)
    w.tensor("RW", f"{dt}[B, K]    input  = random(seed=6)", "routing weights w_{b,k}")
    for k, dims, seed in (("up", "D, F", 7), ("gate", "D, F", 8), ("down", "F, D", 9)):
        w.tensor(names[k], f"{dt}[E, {dims}] weight = random(seed={seed})",
                 spec.experts[k].comment)
    tensors = {X: spec.x.source, "RW": ROUTING_WEIGHTS,
               **{names[k]: t.source for k, t in spec.experts.items()}}
    fields = {"X": X, **names, "combine": spec.combine, **_TILE[tiling]}
    if shared:
        snames = {k: w.name(t.name) for k, t in shared.weights.items()}
        for k, dims, seed in (("up", "D, FS", 10), ("gate", "D, FS", 11), ("down", "FS, D", 12)):
            decl = f"{dt}[{dims}]".ljust(len(dt) + 10) + f"weight = random(seed={seed})"
            w.tensor(snames[k], decl,
                     shared.weights[k].comment)
        tensors.update({snames[k]: t.source for k, t in shared.weights.items()})
        fields.update({f"s{k}": v for k, v in snames.items()})
        if shared.gate:
            fields["sg"] = w.name(shared.gate.name)
            w.tensor(fields["sg"], f"{dt}[D, 1]".ljust(len(dt) + 10) + "weight = random(seed=13)",
                     shared.gate.comment)
            tensors[fields["sg"]] = shared.gate.source
    w.tensor("Y", "f32[B, D]     output", "the block's output (f32 accumulation)")
    tensors["Y"] = "output"
    body = (_TIMEMUX_BODY if tiling == "timemux" else _GRAPH + _ROUTE + _LOOP)
    if shared:
        body = (_GRAPH if tiling == "timemux" else "") + body + _SHARED[tiling == "dynamic"]
        body += _SHARED_GATE if shared.gate else "shared = FlatMap(sffn, fn={split})\n"
        body += _SHARED_TAIL
    else:
        body += _TAIL
    w.graph(body.format(**fields))
    return tensors


_HEADER = {
    "static": ["A Mixture-of-Experts layer with SwiGLU experts and STATIC tiling of each",
               "expert's tokens: ceil(n_e / TILE_N) tiles of TILE_N rows, the expert's weights",
               "streamed once per token tile (as programs/moe_static.step)."],
    "dynamic": ["A Mixture-of-Experts layer with SwiGLU experts and DYNAMIC tiling: each active",
                "expert packs its n_e tokens into one tile of n_e rows, so its weights are",
                "streamed once (as programs/moe_dynamic.step)."],
    "timemux": ["A Mixture-of-Experts layer with SwiGLU experts, static tiling and CONFIGURATION",
                "TIME-MULTIPLEXING: R regions of G = E / R experts share one set of SwiGLU",
                "operators (as programs/moe_timemux.step)."],
}

_TILE = {
    "static": {"tile": "tiles, _ = Reshape(rows, chunk=TILE_N, pad=zero)",
               "tile_c": "[ceil(n_e/TILE_N), TILE_N]", "pack_bw": "BW",
               "split": "retile_streamify(filter=true)"},
    "dynamic": {"tile": "tiles    = Promote(rows)", "tile_c": "[(1 if n_e > 0 else 0), n_e]",
                "pack_bw": "PACK_BW", "split": "retile_streamify"},
    "timemux": {"split": "retile_streamify(filter=true)"},
}

_GRAPH = """
# y = (x W_up * silu(x W_gate)) W_down for a stream of token tiles `xt` ([c] of [rows, D]):
# every token tile streams the expert's weights from HBM in F-tiles of TILE_F columns.
graph swiglu_expert(xt, w_up, w_gate, w_down, nf=NF) {{
    xr   = Repeat(xt, count=nf)                                       # [c, NF] token tiles
    wu   = Flatten(LinearOffChipLoad(w_up, ref=xt, tile=[D, TILE_F]), min=0, max=1)
    wg   = Flatten(LinearOffChipLoad(w_gate, ref=xt, tile=[D, TILE_F]), min=0, max=1)
    wd   = Flatten(LinearOffChipLoad(w_down, ref=xt, tile=[TILE_F, D]), min=0, max=1)
    up   = Map(xr, wu, fn=matmul, dtype=f32, compute_bw=BW)           # [c, NF] of [rows, TILE_F]
    gate = Map(xr, wg, fn=matmul, dtype=f32, compute_bw=BW)
    act  = Map(gate, fn=silu, compute_bw=BW)
    h    = Map(up, act, fn=mul, compute_bw=BW)
    down = Accum(h, wd, fn=matmul, rank=1, dtype=f32, compute_bw=BW)  # [c] of [rows, D]
    return down
}}
"""

_ROUTE = """
# The routing decisions, read three ways: one multi-hot selector per token to route the
# tokens, one one-hot selector per (token, k) to route the weights, one for the merge.
stream route  : Strm<MultiHot<E>, 0>[B]    = external("routing", topk=K)
stream wsel   : Strm<MultiHot<E>, 1>[B, K] = external("routing", topk=K)
stream merge  : Strm<MultiHot<E>, 0>[B]    = external("routing", topk=K)

x  = LinearOffChipLoad({X}, tile=[1, D])                    # [B, 1] of [1, D]
p  = Partition(x, route, rank=1, consumers=E, dim="n")     # p[e]: [n_e, 1]
w  = LinearOffChipLoad(RW, tile=[1, 1])                    # [B, K] of [1, 1]
pw = Partition(w, wsel, rank=0, consumers=E, dim="m")      # pw[e]: [m_e]
"""

_COMBINE = """
# The weighted combine ({combine}): each token's k expert rows, summed.
ys  = Reassemble(y, merge, rank=0)                         # [B, k_b]: the rows of token b
sum = Accum(ys, fn=add, rank=1, compute_bw=BW)             # [B] of [1, D]
"""

_TAIL = _COMBINE + """LinearOffChipStore(sum, Y)
"""

_LOOP = """
for e in 0..E {{
    rows     = Flatten(p[e], min=0, max=1)                 # [n_e] of [1, D]
    {tile}     # {tile_c}
    xt       = Accum(tiles, fn=retile_row, rank=1, dtype=f32, compute_bw={pack_bw})
    ffn      = swiglu_expert(xt, {up}[e], {gate}[e], {down}[e])
    out      = FlatMap(ffn, fn={split})   # the n_e rows
    assume shape(out) == shape(rows)
    assume shape(pw[e]) == shape(rows)                     # one weight per routed token
    y[e]     = Map(pw[e], out, fn=mul, dtype=f32, compute_bw=BW)
}}
"""

_TIMEMUX_BODY = """
# One time-multiplexed SwiGLU region: its G experts' token tiles in arrival order (`xt`)
# with one-hot selectors over them (`sel`); the weights of the selected expert are read
# by address from the concatenated expert matrices, from the region's first tile `base`.
graph timemux_swiglu(xt, sel, base) {{
    xr   = Repeat(xt, count=NF)                                       # [S, NF] token tiles
    addr = FlatMap(sel, fn=expert_addr(tiles=NF, base=base))          # [S, NF, 1] tile ids
    wu   = Flatten(RandomOffChipLoad(addr, {up}, tile=[D, TILE_F]), min=0, max=1)
    wg   = Flatten(RandomOffChipLoad(addr, {gate}, tile=[D, TILE_F]), min=0, max=1)
    wd   = Flatten(RandomOffChipLoad(addr, {down}, tile=[TILE_F, D]), min=0, max=1)
    up   = Map(xr, wu, fn=matmul, dtype=f32, compute_bw=BW)           # [S, NF] of [rows, TILE_F]
    gate = Map(xr, wg, fn=matmul, dtype=f32, compute_bw=BW)
    act  = Map(gate, fn=silu, compute_bw=BW)
    h    = Map(up, act, fn=mul, compute_bw=BW)
    down = Accum(h, wd, fn=matmul, rank=1, dtype=f32, compute_bw=BW)  # [S] of [rows, D]
    return down
}}
""" + _ROUTE + """
for r in 0..R {{
    for g in 0..G {{
        rows     = Flatten(p[r * G + g], min=0, max=1)     # [n_e] of [1, D]
        tiles, _ = Reshape(rows, chunk=TILE_N, pad=zero)   # [ceil(n_e/TILE_N), TILE_N]
        xt       = Accum(tiles, fn=retile_row, rank=1, dtype=f32, compute_bw=BW)
    }}
    mx, sel = EagerMerge(xt)                               # [S_r] tiles, [S_r] selectors
    down    = timemux_swiglu(mx, sel, r * G * NF)          # [S_r] of [TILE_N, D]
    back    = Partition(down, sel, rank=0, consumers=G, dim="c")
    for g in 0..G {{
        assume shape(back[g]) == shape(xt[g])              # each expert gets its tiles back
        out      = FlatMap(back[g], fn=retile_streamify(filter=true))   # the n_e real rows
        assume shape(out) == shape(rows[g])
        assume shape(pw[r * G + g]) == shape(rows[g])      # one weight per routed token
        y[r * G + g] = Map(pw[r * G + g], out, fn=mul, dtype=f32, compute_bw=BW)
    }}
}}
"""

# The shared expert: every token, tiled like the routed experts' tokens ([static/timemux,
# dynamic]); its weights stream once per token tile.
_SHARED = ["""
# The shared expert: all B tokens in ceil(B / TILE_N) tiles of TILE_N rows.
srows     = Flatten(x, min=0, max=1)                       # [B] of [1, D]
stiles, _ = Reshape(srows, chunk=TILE_N, pad=zero)         # [ceil(B/TILE_N), TILE_N]
sxt       = Accum(stiles, fn=retile_row, rank=1, dtype=f32, compute_bw=BW)
sffn      = swiglu_expert(sxt, {sup}, {sgate}, {sdown}, nf=NFS)
""", """
# The shared expert: all B tokens in one tile of B rows.
srows = Flatten(x, min=0, max=1)                           # [B] of [1, D]
sgrp  = Promote(srows)                                     # [1, B]
sxt   = Accum(sgrp, fn=retile_row, rank=1, dtype=f32, compute_bw=PACK_BW)
sffn  = swiglu_expert(sxt, {sup}, {sgate}, {sdown}, nf=NFS)
"""]

_SHARED_GATE = """# Its gate: sigmoid(x . w_g) per token, scaling the expert's output row.
sgw    = Flatten(LinearOffChipLoad({sg}, ref=sxt, tile=[D, 1]), min=0, max=2)
sgl    = Map(sxt, sgw, fn=matmul, dtype=f32, compute_bw=BW)
sgs    = Map(sgl, fn=sigmoid, compute_bw=BW)
sgated = Map(sffn, sgs, fn=mul, compute_bw=BW)
shared = FlatMap(sgated, fn={split})
"""

_SHARED_TAIL = """assume shape(shared) == shape(srows)                       # the B real rows
""" + _COMBINE + """total = Map(sum, shared, fn=add, compute_bw=BW)           # routed + shared
LinearOffChipStore(total, Y)
"""
