"""Lowering of dense blocks: Linear / matmul / addmm (+ bias), SiLU, GELU, elementwise
add/sub/mul/div, RMSNorm and softmax as row reductions, and the SwiGLU MLP fused the way the
paper's SwiGLU workload streams it.

Every activation `[B, C]` is a stream of `B // TB` row tiles `[TB, C]`. A linear layer
repeats each row tile once per weight tile of `TILE_F` output columns and re-reads the
weights for every row tile; a SwiGLU MLP never materialises its intermediate: per
`TILE_F` slice it computes gate, up, SiLU and the product and accumulates the down
projection (programs/swiglu.step's schedule).
"""

from __future__ import annotations

from dataclasses import dataclass

from stepc.torch.capture import LoweringError, Node
from stepc.torch.emit import StepWriter

_ELEMENTWISE = {"add": "add", "sub": "sub", "mul": "mul", "div": "div"}
_UNARY = {"silu": "silu", "exp": "exp", "sigmoid": "sigmoid", "tanh": "tanh", "rsqrt": "rsqrt"}
_IGNORED = {"getitem", "alias", "detach", "clone", "contiguous"}


@dataclass
class Val:
    """An activation stream: `[MT] of [TB, cols]`."""

    stream: str
    cols: int
    dtype: str


def _fail(node: Node, why: str) -> LoweringError:
    return LoweringError(f"unsupported: aten.{node.op} in {node.site}: {why}")


class DenseLowering:
    """Walks the captured nodes once, emitting statements; nothing is returned half-way
    (the caller renders the writer only when the whole walk succeeded)."""

    def __init__(self, nodes: list[Node], w: StepWriter, tb: int, tile_f: int):
        self.nodes, self.w, self.tb, self.tile_f = nodes, w, tb, tile_f
        self.vals: dict[str, Val] = {}
        self.tensors: dict[str, str] = {}  # program tensor -> state-dict key or input name
        self.fused: set[str] = set()
        self.weights_declared: dict[str, str] = {}

    # ---------------------------------------------------------------- declarations
    def weight(self, p: Node, shape: list[int] | None = None) -> str:
        if p.op != "param":
            raise _fail(p, "expected a parameter")
        if p.target in self.weights_declared:
            return self.weights_declared[p.target]
        name = self.w.name(p.target.replace(".", "_"))
        shape = shape or list(p.shape)
        self.w.tensor(name, f"{p.dtype}{shape} weight = random(seed={len(self.w.tensors) + 1})",
                      f"{p.target} {list(p.shape)}")
        self.tensors[name] = p.target
        self.weights_declared[p.target] = name
        return name

    def cols_tiles(self, n: int, node: Node) -> str:
        if n % self.tile_f:
            raise LoweringError(f"{node.site}: {n} columns are not a multiple of TILE_F = "
                                f"{self.tile_f} (choose a TILE_F that divides it)")
        return f"{n} // TILE_F"

    def val(self, a, node: Node) -> Val:
        if not isinstance(a, Node) or a.name not in self.vals:
            raise _fail(node, f"operand {a!r} is not an activation stream stepc tracks")
        return self.vals[a.name]

    # ---------------------------------------------------------------- operators
    def run(self, rows: int) -> None:
        for node in self.nodes:
            parts = self.swiglu_parts(node)
            if parts:
                self.fused |= {p.name for p in parts}
        for node in self.nodes:
            if node.op in ("param", "input", "output") or node.name in self.fused:
                if node.op == "input":
                    self.input(node, rows)
                elif node.op == "output":
                    self.output(node)
                continue
            if node.op in _IGNORED and node.args and isinstance(node.args[0], Node) \
                    and node.args[0].name in self.vals:
                self.vals[node.name] = self.vals[node.args[0].name]
                continue
            if self._swiglu(node):
                continue
            method = getattr(self, f"op_{node.op}", None)
            if method is None:
                raise LoweringError(f"unsupported operator aten.{node.op} ({node.target}) in "
                                    f"{node.site}; stepc lowers linear, matmul, addmm, silu, "
                                    "gelu, add, sub, mul, div, rms_norm, softmax, top-k "
                                    "MoE blocks and decode attention")
            self.w.blank(f"{node.site.module or node.name}: aten.{node.op}"
                         + (f" ({node.site.line})" if node.site.line else ""))
            method(node)

    def input(self, node: Node, rows: int) -> None:
        if len(node.shape) != 2 or node.shape[0] != rows:
            raise LoweringError(f"input `{node.name}` is {list(node.shape)}: stepc lowers "
                                f"[B, C] activations with the same B = {rows} rows")
        t = self.w.name(node.name.upper())
        self.w.tensor(t, f"{node.dtype}[B, {node.shape[1]}] input = random(seed="
                      f"{len(self.w.tensors) + 1})", f"forward argument `{node.name}`")
        self.tensors[t] = node.name
        s = self.w.name(node.name)
        self.w.stmt(f"{s} = LinearOffChipLoad({t}, tile=[TB, {node.shape[1]}], shape=[MT])",
                    f"[MT] of [TB, {node.shape[1]}]")
        self.vals[node.name] = Val(s, node.shape[1], node.dtype)

    def output(self, node: Node) -> None:
        if len(node.args) != 1:
            raise LoweringError(f"the module returns {len(node.args)} values; stepc lowers "
                                "modules with one output tensor")
        v = self.val(node.args[0], node)
        t = self.w.name("Y")
        self.w.tensor(t, f"{v.dtype}[B, {v.cols}] output", "the module's output")
        self.tensors[t] = "output"
        self.w.blank()
        self.w.stmt(f"LinearOffChipStore({v.stream}, {t})")

    def _linear(self, node: Node, x: Val, wname: str, out_cols: int, transpose: bool,
                bias: Node | None) -> None:
        base = node.site.module or node.name
        nt = self.cols_tiles(out_cols, node)
        tile = f"[TILE_F, {x.cols}]" if transpose else f"[{x.cols}, TILE_F]"
        xr, wl, y = self.w.name(f"{base}_x"), self.w.name(f"{base}_w"), self.w.name(base)
        self.w.stmt(f"{xr} = Repeat({x.stream}, count={nt})",
                    f"[MT, {out_cols} / TILE_F] of [TB, {x.cols}]")
        self.w.stmt(f"{wl} = LinearOffChipLoad({wname}, tile={tile}, stride=[0, 1], "
                    f"shape=[MT, {nt}])", "re-read for every row tile")
        mm = "matmul(transpose=true)" if transpose else "matmul"
        part = self.w.name(f"{base}_t")
        self.w.stmt(f"{part} = Map({xr}, {wl}, fn={mm}, dtype={node.dtype})",
                    "[MT, .] of [TB, TILE_F]")
        if bias is not None:
            b = self.weight(bias, [1, out_cols])
            bl = self.w.name(f"{base}_b")
            self.w.stmt(f"{bl} = LinearOffChipLoad({b}, tile=[1, TILE_F], stride=[0, 1], "
                        f"shape=[MT, {nt}])")
            part2 = self.w.name(f"{base}_tb")
            self.w.stmt(f"{part2} = Map({part}, {bl}, fn=add)", "+ bias")
            part = part2
        self.w.stmt(f"{y} = Accum({part}, fn=retile_col, rank=1)", f"[MT] of [TB, {out_cols}]")
        self.vals[node.name] = Val(y, out_cols, node.dtype)

    def op_linear(self, node: Node) -> None:
        x, wp = node.args[0], node.args[1]
        bias = node.args[2] if len(node.args) > 2 else None
        xv = self.val(x, node)
        if wp.op != "param" or len(wp.shape) != 2:
            raise _fail(node, "the weight must be a [out, in] parameter")
        self._linear(node, xv, self.weight(wp), wp.shape[0], True, bias)

    def op_matmul(self, node: Node, bias: Node | None = None) -> None:
        a, b = node.args[0], node.args[1]
        if not isinstance(b, Node) or b.op != "param" or len(b.shape) != 2:
            raise _fail(node, "stepc lowers matmul of an activation by a [in, out] parameter")
        self._linear(node, self.val(a, node), self.weight(b), b.shape[1], False, bias)

    op_mm = op_matmul

    def op_addmm(self, node: Node) -> None:
        bias, a, b = node.args[:3]
        if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
            raise _fail(node, "alpha and beta other than 1")
        node.args = (a, b)
        self.op_matmul(node, bias)

    def _map(self, node: Node, args: list[str], fn: str, cols: int) -> None:
        s = self.w.name(node.name)
        self.w.stmt(f"{s} = Map({', '.join(args)}, fn={fn})", f"[MT] of [TB, {cols}]")
        self.vals[node.name] = Val(s, cols, node.dtype)

    def _binary(self, node: Node) -> None:
        if node.kwargs.get("alpha", 1) != 1 or len(node.args) > 2:
            raise _fail(node, "alpha other than 1")
        a, b = (self.val(x, node) for x in node.args[:2])
        if a.cols != b.cols:
            raise _fail(node, f"operands of {a.cols} and {b.cols} columns (stepc lowers "
                              "elementwise ops of equal shapes)")
        self._map(node, [a.stream, b.stream], _ELEMENTWISE[node.op], a.cols)

    op_add = op_sub = op_mul = op_div = _binary

    def _unary(self, node: Node) -> None:
        x = self.val(node.args[0], node)
        self._map(node, [x.stream], _UNARY[node.op], x.cols)

    op_silu = op_exp = op_sigmoid = op_tanh = op_rsqrt = _unary

    def op_gelu(self, node: Node) -> None:
        x = self.val(node.args[0], node)
        approx = node.kwargs.get("approximate", "none")
        self._map(node, [x.stream], "gelu" if approx == "none" else f'gelu(approximate="{approx}")',
                  x.cols)

    def op_rms_norm(self, node: Node) -> None:
        x = self.val(node.args[0], node)
        shape, wp = node.args[1], node.args[2] if len(node.args) > 2 else None
        eps = node.args[3] if len(node.args) > 3 else node.kwargs.get("eps")
        if list(shape) != [x.cols]:
            raise _fail(node, f"normalized_shape {list(shape)} (stepc normalises rows)")
        if eps is None:
            raise _fail(node, "eps=None (the dtype's machine epsilon); give the module an eps")
        base = node.site.module or node.name
        r, n = self.w.name(f"{base}_inv"), self.w.name(f"{base}_n")
        self.w.stmt(f'{r} = Map({x.stream}, fn=rms_inv(eps="{eps!r}"))',
                    "[MT] of [TB, 1]: 1/sqrt(mean(x^2) + eps)")
        self.w.stmt(f"{n} = Map({x.stream}, {r}, fn=mul)", f"[MT] of [TB, {x.cols}]")
        if wp is None:
            self.vals[node.name] = Val(n, x.cols, node.dtype)
            return
        wt = self.weight(wp, [1, x.cols])
        wl, y = self.w.name(f"{base}_w"), self.w.name(base)
        self.w.stmt(f"{wl} = LinearOffChipLoad({wt}, tile=[1, {x.cols}], stride=[0], "
                    "shape=[MT])", "the scale, once per row tile")
        self.w.stmt(f"{y} = Map({n}, {wl}, fn=mul)", f"[MT] of [TB, {x.cols}]")
        self.vals[node.name] = Val(y, x.cols, node.dtype)

    def op_softmax(self, node: Node) -> None:
        x = self.val(node.args[0], node)
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        if dim not in (-1, 1):
            raise _fail(node, f"softmax over dim {dim} (stepc reduces rows: dim=-1)")
        base = node.name
        m, s, e, d, y = (self.w.name(f"{base}_{k}") for k in ("max", "shift", "exp", "sum", "y"))
        dt = f", dtype={node.dtype}" if node.dtype != x.dtype else ""
        self.w.stmt(f"{m} = Map({x.stream}, fn=row_max)", "[MT] of [TB, 1]")
        self.w.stmt(f"{s} = Map({x.stream}, {m}, fn=sub{dt})", "x - max")
        self.w.stmt(f"{e} = Map({s}, fn=exp)")
        self.w.stmt(f"{d} = Map({e}, fn=row_sum)", "[MT] of [TB, 1]")
        self.w.stmt(f"{y} = Map({e}, {d}, fn=div)", f"[MT] of [TB, {x.cols}]")
        self.vals[node.name] = Val(y, x.cols, node.dtype)

    op__softmax = op_softmax

    # ---------------------------------------------------------------- SwiGLU
    @staticmethod
    def swiglu_parts(down: Node):
        """down(silu(gate(x)) * up(x)) with the intermediate used nowhere else:
        (gate, up, silu, mul), else None."""
        mul = down.args[0] if down.op == "linear" else None
        if not (isinstance(mul, Node) and mul.op == "mul" and len(mul.users) == 1):
            return None
        a, b = mul.args[:2]
        if isinstance(b, Node) and b.op == "silu":
            a, b = b, a
        if not (isinstance(a, Node) and a.op == "silu" and len(a.users) == 1):
            return None
        gate, up = a.args[0], b
        ok = all(isinstance(n, Node) and n.op == "linear" and len(n.args) == 2
                 and len(n.users) == 1 for n in (gate, up))
        if not ok or gate.args[0] is not up.args[0]:
            return None
        return gate, up, a, mul

    def _swiglu(self, down: Node) -> bool:
        """One fused block that streams TILE_F columns of the intermediate at a time."""
        parts = self.swiglu_parts(down)
        if parts is None:
            return False
        gate, up, a, mul = parts
        x = self.val(gate.args[0], down)
        wg, wu, wd = gate.args[1], up.args[1], down.args[1]
        f = wg.shape[0]
        base = down.site.module.rsplit(".", 1)[0] if "." in down.site.module else "mlp"
        nt = self.cols_tiles(f, down)
        g, u, d = self.weight(wg), self.weight(wu), self.weight(wd)
        s = {k: self.w.name(f"{base}_{k}" if base != "mlp" else k)
             for k in ("xr", "wg", "wu", "wd", "gate", "up", "act", "h", "down")}
        self.w.blank(f"SwiGLU MLP: {down.site.module or down.name}(silu("
                     f"{gate.site.module}(x)) * {up.site.module}(x))"
                     + (f" ({down.site.line})" if down.site.line else ""))
        self.w.stmt(f"{s['xr']} = Repeat({x.stream}, count={nt})",
                    f"[MT, {f} / TILE_F] of [TB, {x.cols}]")
        self.w.stmt(f"{s['wg']} = LinearOffChipLoad({g}, tile=[TILE_F, {x.cols}], "
                    f"stride=[0, 1], shape=[MT, {nt}])", "re-read for every row tile")
        self.w.stmt(f"{s['wu']} = LinearOffChipLoad({u}, tile=[TILE_F, {x.cols}], "
                    f"stride=[0, 1], shape=[MT, {nt}])")
        self.w.stmt(f"{s['wd']} = LinearOffChipLoad({d}, tile=[{wd.shape[0]}, TILE_F], "
                    f"stride=[0, 1], shape=[MT, {nt}])")
        self.w.stmt(f"{s['gate']} = Map({s['xr']}, {s['wg']}, fn=matmul(transpose=true))",
                    f"{gate.site.module}: [MT, .] of [TB, TILE_F]")
        self.w.stmt(f"{s['up']} = Map({s['xr']}, {s['wu']}, fn=matmul(transpose=true))",
                    up.site.module)
        self.w.stmt(f"{s['act']} = Map({s['gate']}, fn=silu)")
        self.w.stmt(f"{s['h']} = Map({s['up']}, {s['act']}, fn=mul)")
        self.w.stmt(f"{s['down']} = Accum({s['h']}, {s['wd']}, fn=matmul(transpose=true), "
                    "rank=1)", f"{down.site.module}: [MT] of [TB, {wd.shape[0]}]")
        out = s["down"]
        if len(down.args) > 2 and down.args[2] is not None:
            bt = self.weight(down.args[2], [1, wd.shape[0]])
            bl = self.w.name(f"{base}_b")
            self.w.stmt(f"{bl} = LinearOffChipLoad({bt}, tile=[1, {wd.shape[0]}], stride=[0], "
                        "shape=[MT])")
            out = self.w.name(f"{base}_out")
            self.w.stmt(f"{out} = Map({s['down']}, {bl}, fn=add)", "+ bias")
        self.vals[down.name] = Val(out, wd.shape[0], down.dtype)
        return True


def lower_dense(nodes: list[Node], w: StepWriter, sched: dict) -> dict[str, str]:
    """Emit a dense block into `w`; returns the program tensors' sources (state-dict keys,
    forward argument names, or "output")."""
    lw = DenseLowering(nodes, w, sched["TB"], sched["TILE_F"])
    lw.run(sched["B"])
    return lw.tensors
