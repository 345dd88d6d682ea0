"""Node-by-node lowering of dense blocks: the linear family (linear, matmul, mm, addmm, +
bias, and batched by a `[G, in, out]` parameter), the SwiGLU MLP fused the way the
paper's SwiGLU workload streams it, with the layout bookkeeping of `stepc.torch.layout`
(views, casts, transposes, heads) and the element-wise ops and row reductions of
`stepc.torch.rowwise`.

Every activation is a stream of `B // TB` row tiles `[TB, C]`: its leading dims fold into
the B rows (`[batch, seq, hidden]` is `[batch * seq, hidden]`), its last dim is the tile's
columns. A linear layer repeats each row tile once per weight tile of `TILE_F` output
columns and re-reads the weights for every row tile; a SwiGLU MLP never materialises its
intermediate: per `TILE_F` slice it computes gate, up, SiLU and the product and
accumulates the down projection (programs/swiglu.step's schedule).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stepc.torch.canon import rows_cols, unsupported
from stepc.torch.capture import LoweringError, Node
from stepc.torch.dense_block import DenseBlock, Handler, Val, fail
from stepc.torch.emit import StepWriter
from stepc.torch.layout import LayoutOps
from stepc.torch.rowwise import RowwiseOps

DENSE_PARAMS = ("TB", "TILE_F")

# aten operator -> what it becomes, for the support table (rowwise.py adds its own)
LINEAR_KINDS = {
    "linear, matmul, mm, addmm (+ bias)": "`Repeat` of the row tile, weight tiles of "
    "`TILE_F` columns, `Map(matmul)`, bias `Map(add)`, `Accum(retile_col)`",
    "bmm, matmul of `[G, N, in]` by a parameter `[G, in, out]` (or `W.transpose(1, 2)`)":
    "the same, each row tile reading its batch's weight tiles (`Flatten` of a "
    "`[G, N / TB, out / TILE_F]` view); `bmm` of two activations is refused",
    "down(silu(gate(x)) * up(x))": "one fused SwiGLU: per `TILE_F` slice gate, up, SiLU, "
    "product, `Accum(matmul)` of the down projection (programs/swiglu.step's schedule)",
    "chunk, split: `gate, up = gate_up_proj(x).chunk(2, -1)` feeding that SwiGLU (Phi-3)":
    "the same fused SwiGLU, the `[2F, D]` weight declared `[2, F, D]` and its halves "
    "loaded as `W[0]`, `W[1]`; another split of an activation's columns is refused",
}


@dataclass
class SwiGLUParts:
    """The pieces of one SwiGLU MLP: its input, the gate and up weights as (parameter,
    half of a fused [2F, D] weight or None), the nodes it replaces, and names for comments."""

    x: Node
    gate: tuple[Node, int | None]
    up: tuple[Node, int | None]
    nodes: set[str]
    gate_site: str
    up_site: str


def _fused_halves(gate: Node, up: Node):
    """(fused linear, split, (gate half, up half)) when gate and up are the two halves of
    one linear's output split along its last dim; else None."""
    if not (gate.op == up.op == "getitem" and gate.args[0] is up.args[0]):
        return None
    split = gate.args[0]
    fused = split.args[0] if split.op == "split" else None
    if not (isinstance(fused, Node) and fused.op == "linear" and len(fused.args) == 2
            and len(fused.users) == 1 and len(split.users) == 2):
        return None
    sizes, dim = split.kwargs["sizes"], split.kwargs["dim"]
    if dim % len(fused.shape) != len(fused.shape) - 1 or len(sizes) != 2 \
            or sizes[0] != sizes[1]:
        return None
    return fused, split, (gate.args[1], up.args[1])


class LinearOps:
    """The linear family of a dense block, and the SwiGLU MLP fused."""

    def __init__(self, block: DenseBlock):
        self.block, self.w = block, block.w

    def handlers(self) -> dict[str, Handler]:
        """Each aten operator this part lowers, with its lowering."""
        return {"linear": self.linear, "matmul": self.matmul, "mm": self.matmul,
                "bmm": self.matmul, "addmm": self.addmm}

    def _linear(self, node: Node, x: Val, wname: str, out_cols: int, transpose: bool,
                bias: Node | None, groups: int = 0) -> None:
        """x times a weight `[in, out]` (`[out, in]` when `transpose`), in TILE_F columns;
        with `groups` G, x is `[G, N, in]` and the weight `[G, in, out]`: row tile m reads
        group m // (N / TB)'s matrix (a batched matmul)."""
        if x.vector or x.per_tile:
            raise fail(node, "a matmul of a reduced row vector or of a parameter's function")
        if x.heads:
            raise fail(node, f"a linear layer of {list(x.shape)}, split into heads (merge "
                             "them first: `.transpose(1, 2).reshape(*input_shape, -1)`)")
        base = node.site.module or node.name
        nt = self.block.cols_tiles(out_cols, node)
        tile = f"[TILE_F, {x.cols}]" if transpose else f"[{x.cols}, TILE_F]"
        xr, wl, y = self.w.name(f"{base}_x"), self.w.name(f"{base}_w"), self.w.name(base)
        self.w.stmt(f"{xr} = Repeat({x.stream}, count={nt})",
                    f"[MT, {out_cols} / TILE_F] of [TB, {x.cols}]")
        if groups:
            per_group = x.rows // groups
            if per_group % self.block.tb:
                raise fail(node, f"TB = {self.block.tb} does not divide the {per_group} rows of "
                                 "each batch of the batched matmul (choose a TB that does)")
            self.w.stmt(f"{wl} = Flatten(LinearOffChipLoad({wname}, tile={tile}, stride=["
                        f"{nt}, 0, 1], shape=[{groups}, {per_group} // TB, {nt}]), min=1, "
                        "max=2)", f"[MT, {out_cols} / TILE_F]: each row tile's batch")
        else:
            self.w.stmt(f"{wl} = LinearOffChipLoad({wname}, tile={tile}, stride=[0, 1], "
                        f"shape=[MT, {nt}])", "re-read for every row tile")
        mm = "matmul(transpose=true)" if transpose else "matmul"
        part = self.w.name(f"{base}_t")
        self.w.stmt(f"{part} = Map({xr}, {wl}, fn={mm}, dtype={node.dtype})",
                    "[MT, .] of [TB, TILE_F]")
        if bias is not None:
            b = self.block.weight(bias, [1, out_cols])
            bl = self.w.name(f"{base}_b")
            self.w.stmt(f"{bl} = LinearOffChipLoad({b}, tile=[1, TILE_F], stride=[0, 1], "
                        f"shape=[MT, {nt}])")
            part2 = self.w.name(f"{base}_tb")
            self.w.stmt(f"{part2} = Map({part}, {bl}, fn=add)", "+ bias")
            part = part2
        self.w.stmt(f"{y} = Accum({part}, fn=retile_col, rank=1)", f"[MT] of [TB, {out_cols}]")
        self.block.vals[node.name] = Val(y, node.shape, node.dtype)

    def linear(self, node: Node) -> None:
        x, wp = node.args[0], node.args[1]
        bias = node.args[2] if len(node.args) > 2 else None
        xv = self.block.val(x, node)
        if not (isinstance(wp, Node) and wp.op == "param" and len(wp.shape) == 2):
            raise fail(node, "the weight must be a [out, in] parameter")
        self._linear(node, xv, self.block.weight(wp), wp.shape[0], True, bias)

    def matmul(self, node: Node, bias: Node | None = None) -> None:
        a, b = node.args[0], node.args[1]
        pv = self.block.param_view(b)
        x = self.block.val(a, node)
        if pv is not None and len(pv[0].shape) == 3 and bias is None:
            self._batched(node, x, *pv)
            return
        if pv is None or len(pv[0].shape) != 2:
            raise fail(node, "stepc lowers the matmul of an activation by a 2-D parameter "
                             "(or its transpose), or the batched matmul of an activation "
                             "[G, N, in] by a parameter [G, in, out] (not of two activations)")
        p, transposed = pv
        out_cols = p.shape[0] if transposed else p.shape[1]
        self._linear(node, x, self.block.weight(p), out_cols, transposed, bias)

    def _batched(self, node: Node, x: Val, p: Node, transposed: bool) -> None:
        """`bmm(x [G, N, in], W [G, in, out])` (or `W.transpose(1, 2)` of `[G, out, in]`):
        one tiled matmul whose weight tiles follow each row tile's batch."""
        groups = p.shape[0]
        inner = p.shape[2] if transposed else p.shape[1]
        if len(x.shape) != 3 or x.shape[0] != groups or x.cols != inner or x.heads:
            raise fail(node, f"a batched matmul of {list(x.shape)} by the parameter "
                             f"`{p.target}` {list(p.shape)}" + (" transposed" if transposed
                                                                else "")
                             + f" (stepc lowers [{groups}, N, {inner}] activations by it)")
        out_cols = p.shape[1] if transposed else p.shape[2]
        self._linear(node, x, self.block.weight(p), out_cols, transposed, None, groups)

    def addmm(self, node: Node) -> None:
        bias, a, b = node.args[:3]
        if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
            raise fail(node, "alpha and beta other than 1")
        node.args = (a, b)
        self.matmul(node, bias)

    # ---------------------------------------------------------------- SwiGLU
    @staticmethod
    def swiglu_parts(down: Node) -> SwiGLUParts | None:
        """down(silu(gate(x)) * up(x)) with the intermediate used nowhere else, gate and up
        two linears of x or the halves of one fused linear (`gate_up_proj(x).chunk(2, -1)`,
        as Phi-3 writes it); else None."""
        mul = down.args[0] if down.op == "linear" else None
        if not (isinstance(mul, Node) and mul.op == "mul" and len(mul.users) == 1):
            return None
        a, b = mul.args[:2]
        if isinstance(b, Node) and b.op == "silu":
            a, b = b, a
        if not (isinstance(a, Node) and a.op == "silu" and len(a.users) == 1):
            return None
        gate, up = a.args[0], b
        if not all(isinstance(n, Node) and len(n.users) == 1 for n in (gate, up)):
            return None
        if gate.op == up.op == "linear" and len(gate.args) == len(up.args) == 2 \
                and gate.args[0] is up.args[0]:
            return SwiGLUParts(gate.args[0], (gate.args[1], None), (up.args[1], None),
                               {gate.name, up.name, a.name, mul.name},
                               gate.site.module, up.site.module)
        halves = _fused_halves(gate, up)
        if halves is None:
            return None
        fused, split, (hg, hu) = halves
        return SwiGLUParts(fused.args[0], (fused.args[1], hg), (fused.args[1], hu),
                           {fused.name, split.name, gate.name, up.name, a.name, mul.name},
                           f"{fused.site.module}[{hg}]", f"{fused.site.module}[{hu}]")

    def swiglu(self, down: Node) -> bool:
        """One fused block that streams TILE_F columns of the intermediate at a time."""
        parts = self.swiglu_parts(down)
        if parts is None:
            return False
        x = self.block.val(parts.x, down)
        wd = down.args[1]
        f = wd.shape[1]
        base = down.site.module.rsplit(".", 1)[0] if "." in down.site.module else "mlp"
        nt = self.block.cols_tiles(f, down)
        g, u = (self.block.half_weight(p, half, f) for p, half in (parts.gate, parts.up))
        d = self.block.weight(wd)
        s = {k: self.w.name(f"{base}_{k}" if base != "mlp" else k)
             for k in ("xr", "wg", "wu", "wd", "gate", "up", "act", "h", "down")}
        dt = f", dtype={down.dtype}" if down.dtype != x.dtype else ""
        self.w.blank(f"SwiGLU MLP: {down.site.module or down.name}(silu("
                     f"{parts.gate_site}(x)) * {parts.up_site}(x))"
                     + (f" ({down.site.line})" if down.site.line else ""))
        self.w.stmt(f"{s['xr']} = Repeat({x.stream}, count={nt})",
                    f"[MT, {f} / TILE_F] of [TB, {x.cols}]")
        self.w.stmt(f"{s['wg']} = LinearOffChipLoad({g}, tile=[TILE_F, {x.cols}], "
                    f"stride=[0, 1], shape=[MT, {nt}])", "re-read for every row tile")
        self.w.stmt(f"{s['wu']} = LinearOffChipLoad({u}, tile=[TILE_F, {x.cols}], "
                    f"stride=[0, 1], shape=[MT, {nt}])")
        self.w.stmt(f"{s['wd']} = LinearOffChipLoad({d}, tile=[{wd.shape[0]}, TILE_F], "
                    f"stride=[0, 1], shape=[MT, {nt}])")
        self.w.stmt(f"{s['gate']} = Map({s['xr']}, {s['wg']}, fn=matmul(transpose=true){dt})",
                    f"{parts.gate_site}: [MT, .] of [TB, TILE_F]")
        self.w.stmt(f"{s['up']} = Map({s['xr']}, {s['wu']}, fn=matmul(transpose=true){dt})",
                    parts.up_site)
        self.w.stmt(f"{s['act']} = Map({s['gate']}, fn=silu)")
        self.w.stmt(f"{s['h']} = Map({s['up']}, {s['act']}, fn=mul)")
        self.w.stmt(f"{s['down']} = Accum({s['h']}, {s['wd']}, fn=matmul(transpose=true), "
                    "rank=1)", f"{down.site.module}: [MT] of [TB, {wd.shape[0]}]")
        out = s["down"]
        if len(down.args) > 2 and down.args[2] is not None:
            bt = self.block.weight(down.args[2], [1, wd.shape[0]])
            bl = self.w.name(f"{base}_b")
            self.w.stmt(f"{bl} = LinearOffChipLoad({bt}, tile=[1, {wd.shape[0]}], stride=[0], "
                        "shape=[MT])")
            out = self.w.name(f"{base}_out")
            self.w.stmt(f"{out} = Map({s['down']}, {bl}, fn=add)", "+ bias")
        self.block.vals[down.name] = Val(out, down.shape, down.dtype)
        return True


class DenseLowering:
    """Walks the canonical nodes once, emitting statements; nothing is returned half-way
    (the caller renders the writer only when the whole walk succeeded). Each node goes to
    the part whose table names its operator."""

    def __init__(self, nodes: list[Node], w: StepWriter, rows: int, tb: int, tile_f: int):
        self.nodes, self.w = nodes, w
        self.block = DenseBlock(w, rows, tb, tile_f)
        self.linear = LinearOps(self.block)
        self.layout = LayoutOps(self.block)
        self.rowwise = RowwiseOps(self.block)
        self.handlers: dict[str, Handler] = {**self.linear.handlers(),
                                             **self.layout.handlers(),
                                             **self.rowwise.handlers()}
        self.fused: set[str] = set()

    def run(self) -> None:
        for node in self.nodes:
            parts = LinearOps.swiglu_parts(node)
            if parts:
                self.fused |= parts.nodes
        error = unsupported([n for n in self.nodes if n.name not in self.fused],
                            lambda op: op in self.handlers)
        if error:
            raise error
        for node in self.nodes:
            if node.op == "input":
                self.input(node)
            elif node.op == "output":
                self.output(node)
            elif node.op == "param" or node.name in self.fused:
                continue
            elif node.op in ("view", "cast", "transpose", "getitem"):
                self.handlers[node.op](node)
            elif not self.linear.swiglu(node):
                self.w.blank(f"{node.site.module or node.name}: aten.{node.op}"
                             + (f" ({node.site.line})" if node.site.line else ""))
                self.handlers[node.op](node)

    def input(self, node: Node) -> None:
        rows, cols = rows_cols(node.shape)
        if len(node.shape) < 2 or rows != self.block.rows:
            raise LoweringError(f"input `{node.name}` is {list(node.shape)}: stepc lowers "
                                f"activations [..., C] whose leading dims hold the same "
                                f"{self.block.rows} rows as the first input")
        t = self.w.name(node.name.upper())
        folded = f" {list(node.shape)}, rows folded" if len(node.shape) > 2 else ""
        self.w.tensor(t, f"{node.dtype}[B, {cols}] input = random(seed="
                      f"{len(self.w.tensors) + 1})", f"forward argument `{node.name}`{folded}")
        self.block.tensors[t] = node.name
        s = self.w.name(node.name)
        self.w.stmt(f"{s} = LinearOffChipLoad({t}, tile=[TB, {cols}], shape=[MT])",
                    f"[MT] of [TB, {cols}]")
        self.block.vals[node.name] = Val(s, node.shape, node.dtype)

    def output(self, node: Node) -> None:
        if len(node.args) != 1:
            raise LoweringError(f"the module returns {len(node.args)} values; stepc lowers "
                                "modules with one output tensor")
        arg = node.args[0]
        v = self.block.val(arg, node)
        if v.heads and v.heads_at == len(v.shape) - 2:  # [.., H, Dh] is [.., H * Dh]
            v = self.layout.merge_heads(v, arg)
        if v.vector or v.rows != self.block.rows or v.heads:
            raise fail(arg, f"the output {list(v.shape)} is not [..., C] with the input's "
                            f"{self.block.rows} rows")
        stream = v.stream
        if v.dtype != arg.dtype:
            stream = self.w.name(f"{arg.name}_{arg.dtype}")
            self.w.stmt(f"{stream} = Map({v.stream}, fn=cast, dtype={arg.dtype})",
                        f"`.to({arg.dtype})`")
        t = self.w.name("Y")
        self.w.tensor(t, f"{arg.dtype}[B, {v.cols}] output", "the module's output")
        self.block.tensors[t] = "output"
        self.w.blank()
        self.w.stmt(f"LinearOffChipStore({stream}, {t})")


def lower_dense(nodes: list[Node], w: StepWriter, sched: dict) -> tuple[dict[str, str], dict]:
    """Emit a dense block (canonical nodes) into `w` with the schedule's TB and TILE_F
    (defaults: a power of two up to 16 dividing the rows; up to 64 dividing every linear's
    width). Returns the program tensors' sources (state-dict keys, forward argument names,
    or "output") and the schedule used."""
    unknown = sorted(set(sched) - set(DENSE_PARAMS))
    if unknown:
        raise LoweringError(f"unknown schedule setting {', '.join(unknown)} for a dense block "
                            f"(it takes {', '.join(DENSE_PARAMS)})")
    bad = [f"{k} = {v}" for k, v in sched.items() if not isinstance(v, int) or v < 1]
    if bad:
        raise LoweringError(f"schedule setting {', '.join(bad)}: a dense block's TB and TILE_F "
                            "are positive integers")
    inputs = [n for n in nodes if n.op == "input"]
    rows = rows_cols(inputs[0].shape)[0] if inputs and inputs[0].shape else 0
    widths = _linear_widths(nodes)
    if "TILE_F" in sched and not widths:
        raise LoweringError("schedule setting TILE_F: the block has no linear layer to tile "
                            "(it takes TB)")
    tb = sched.get("TB", _divisor(rows, 16))
    if rows % tb:
        raise LoweringError(f"TB = {tb} does not divide the {rows} rows of the input")
    w.header += ["Activations [B, C] stream as B / TB row tiles [TB, C] (leading dims fold",
                 "into B)" + ("; every linear layer re-reads its weights once per row tile,"
                             if widths else ".")]
    if widths:
        w.header[-1:] = [w.header[-1], "in tiles of TILE_F output columns."]
    w.param("B", rows, "rows (tokens)")
    w.param("TB", tb, "rows per tile")
    used = {"B": rows, "TB": tb}
    if widths:
        used["TILE_F"] = sched.get("TILE_F", _divisor(math.gcd(*widths), 64))
        w.param("TILE_F", used["TILE_F"], "weight columns per tile")
    w.param("MT", "B // TB", "row tiles")
    lw = DenseLowering(nodes, w, rows, tb, used.get("TILE_F", 1))
    lw.run()
    return lw.block.tensors, used


def _divisor(n: int, cap: int) -> int:
    """The largest power of two <= cap dividing n (n itself when n <= cap)."""
    if 0 < n <= cap:
        return n
    d = cap
    while d > 1 and n % d:
        d //= 2
    return max(d, 1)


def _linear_widths(nodes: list[Node]) -> list[int]:
    """Every width a linear layer tiles by TILE_F: its output columns (a SwiGLU's
    intermediate too)."""
    out = []
    for n in nodes:
        if n.op in ("linear", "matmul", "mm", "bmm", "addmm") and n.shape:
            out.append(n.shape[-1])
            if n.op == "linear" and isinstance(n.args[0], Node) and n.args[0].op == "mul":
                out.append(n.args[0].shape[-1])
    return out


__all__ = ["DENSE_PARAMS", "LINEAR_KINDS", "DenseLowering", "lower_dense"]
