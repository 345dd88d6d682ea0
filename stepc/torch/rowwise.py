"""Element-wise operators and row reductions of a dense block, each one `Map` over the
row tiles: binary ops of activations (broadcasting a reduced column or a `[C]` parameter
such as a norm's scale), ops with a Python number (`affine`), unary functions, `pow`, and
`mean`/`sum`/`amax` over the last dim, `rms_norm`, `layer_norm` and `softmax` as row
reductions.
HF's hand-written RMSNorm (`x.to(f32)`, `pow(2).mean(-1, keepdim=True)`,
`rsqrt(var + eps)`, `weight * x.to(dtype)`) lowers through these node by node.
"""

from __future__ import annotations

import math

from stepc.torch.canon import rows_cols
from stepc.torch.capture import Node
from stepc.torch.dense_block import DenseBlock, Handler, Val, fail

BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")
UNARY = {"silu": "silu", "exp": "exp", "sigmoid": "sigmoid", "tanh": "tanh", "rsqrt": "rsqrt",
         "relu": "relu"}
REDUCTIONS = {"mean": "row_mean", "sum": "row_sum", "amax": "row_max"}

# aten operator -> what it becomes, for the support table
ROWWISE_KINDS = {
    "add, sub, mul, div, maximum": "`Map(add)`, ... of activations; a reduced `[.., 1]` "
    "column or a `[C]` parameter (a norm's scale) broadcasts",
    "the same with a Python number (also of a `[C]` parameter: `1 + weight`), neg, sqrt":
    "`Map(affine(scale=..., shift=...))`, `Map(pow(exponent=...))`",
    "silu, gelu (exact or tanh), relu, sigmoid, tanh, exp, rsqrt":
    "`Map(silu)`, `Map(gelu)`, `Map(relu)`, ...",
    "pow (a number exponent)": "`Map(pow(exponent=...))`",
    "mean, sum, amax over the last dim": "`Map(row_mean)`, `Map(row_sum)`, `Map(row_max)`",
    "rms_norm (`nn.RMSNorm`)": "`Map(rms_inv(eps=...))`, `Map(mul)` by it and by the scale",
    "layer_norm (`nn.LayerNorm`)": "`row_mean`, `sub`, `pow`, `row_mean`, `affine`, `rsqrt`, "
    "`mul`, then the scale's `mul` and the bias's `add`",
    "softmax over the last dim": "`row_max`, `sub`, `exp`, `row_sum`, `div`",
}


def _number(x) -> str:
    return repr(float(x))


class RowwiseOps:
    """The element-wise and reduction operators of a dense block."""

    def __init__(self, block: DenseBlock):
        self.block, self.w = block, block.w

    def handlers(self) -> dict[str, Handler]:
        """Each aten operator this part lowers, with its lowering."""
        return {**dict.fromkeys(BINARY, self.binary), "rsub": self.rsub, "neg": self.neg,
                **dict.fromkeys(UNARY, self.unary), "gelu": self.gelu, "pow": self.pow,
                "sqrt": self.sqrt, **dict.fromkeys(REDUCTIONS, self.reduce),
                "rms_norm": self.rms_norm, "layer_norm": self.layer_norm,
                "softmax": self.softmax}

    def _map(self, node: Node, args: list[str], fn: str, first_dtype: str,
             vector: bool = False, comment: str = "", per_tile: bool = False,
             like: Val | None = None) -> None:
        """`Map` of the operand streams; the result keeps `like`'s head split."""
        s = self.w.name(node.name)
        dt = f", dtype={node.dtype}" if node.dtype and node.dtype != first_dtype else ""
        cols = rows_cols(node.shape, vector)[1]
        out = Val(s, node.shape, node.dtype or first_dtype, vector, per_tile,
                  **(like.layout() if like else {}))
        self.w.stmt(f"{s} = Map({', '.join(args)}, fn={fn}{dt})",
                    comment or f"{out.tiles} of [TB, {cols}]")
        self.block.vals[node.name] = out

    def _operand(self, a, other: Val | None, node: Node) -> tuple[str, str, bool]:
        """A binary operand as a stream: (stream, dtype, vector). A parameter `[C]`
        (or `[1, ..., C]`) is loaded once per row tile and broadcasts over the rows."""
        pv = self.block.param_view(a)
        if pv is None:
            v = self.block.val(a, node)
            return v.stream, v.dtype, v.vector
        p, _ = pv
        cols = p.shape[-1] if p.shape else 1
        if other is None or other.vector or cols not in (1, other.cols):
            raise fail(node, f"the parameter `{p.target}` {list(p.shape)} does not broadcast "
                             "along rows (stepc broadcasts a [C] parameter over the rows)")
        return self._param_rows(p, node, other.heads), p.dtype, False

    def _param_rows(self, p: Node, node: Node, heads: int = 0) -> str:
        """A `[C]` parameter loaded as one `[1, C]` tile per row tile (and per head)."""
        cols = p.shape[-1] if p.shape else 1
        if math.prod(p.shape) != cols:
            raise fail(node, f"the parameter `{p.target}` {list(p.shape)} does not broadcast "
                             "along rows (stepc broadcasts a [C] parameter over the rows)")
        wt = self.block.weight(p, [1, cols])
        wl = self.w.name(f"{p.target.replace('.', '_')}_rows")
        view = f"stride=[0, 0], shape=[MT, {heads}]" if heads else "stride=[0], shape=[MT]"
        self.w.stmt(f"{wl} = LinearOffChipLoad({wt}, tile=[1, {cols}], {view})",
                    f"`{p.target}`, once per row tile" + (" and head" if heads else ""))
        return wl

    def binary(self, node: Node) -> None:
        if node.kwargs.get("alpha", 1) != 1 or len(node.args) != 2:
            raise fail(node, "alpha other than 1")
        a, b = node.args
        if not isinstance(a, Node) or not isinstance(b, Node):
            self._with_number(node, a, b)
            return
        if self.block.param_view(a) is not None and self.block.param_view(b) is not None:
            raise fail(node, "an operation of two parameters (fold it into the weights)")
        va = None if self.block.param_view(a) is not None else self.block.val(a, node)
        vb = None if self.block.param_view(b) is not None else self.block.val(b, node)
        sa, da, veca = self._operand(a, vb, node)
        sb, _, vecb = self._operand(b, va, node)
        x, y = va or vb, vb or va
        assert x is not None and y is not None  # two parameters were refused above
        if x.layout() != y.layout() or (x.heads and (x.per_tile or y.per_tile)):
            raise fail(node, f"operands {list(x.shape)} and {list(y.shape)} are split into "
                             "heads differently")
        per_tile = x.per_tile and y.per_tile
        rows_differ = x.rows != y.rows and not (x.per_tile or y.per_tile)
        if va and vb and (veca != vecb or rows_differ
                          or (x.cols != y.cols and 1 not in (x.cols, y.cols))):
            raise fail(node, f"operands {list(x.shape)} and {list(y.shape)} do not "
                             "broadcast row by row")
        fn = {"maximum": "max", "minimum": None}.get(node.op, node.op)
        if fn is None:
            raise fail(node, "minimum of two activations (stepc's library has max)")
        self._map(node, [sa, sb], fn, da, veca and (vecb or vb is None), per_tile=per_tile,
                  like=x)

    def _with_number(self, node: Node, a, b) -> None:
        """`x op c` or `c op x` with a Python number c, as `affine(scale, shift)`."""
        x, c, first = (a, b, True) if isinstance(a, Node) else (b, a, False)
        if not isinstance(c, (int, float)) or isinstance(c, bool):
            raise fail(node, f"operand {c!r} is neither a tensor nor a number")
        if not math.isfinite(c):
            raise fail(node, f"the number {c!r} (STeP's affine takes finite numbers)")
        pv = self.block.param_view(x)
        v = self.block.val(x, node) if pv is None else Val(
            self._param_rows(pv[0], node), pv[0].shape, pv[0].dtype, per_tile=True)
        scale, shift = {
            ("add", True): (1, c), ("add", False): (1, c),
            ("sub", True): (1, -c), ("sub", False): (-1, c),
            ("mul", True): (c, 0), ("mul", False): (c, 0),
            ("div", True): (None, 0), ("rsub", True): (-1, c),
        }.get((node.op, first), (False, 0))
        if scale is False:
            raise fail(node, "a number divided by a tensor")
        if scale is None:  # x / c
            if c == 0:
                raise fail(node, "a division by zero")
            scale = 1 / c
        attrs = ([f'scale="{_number(scale)}"'] if scale != 1 else []) + \
            ([f'shift="{_number(shift)}"'] if shift != 0 else [])
        fn = f"affine({', '.join(attrs)})" if attrs else "cast"
        self._map(node, [v.stream], fn, v.dtype, v.vector, per_tile=v.per_tile, like=v)

    def rsub(self, node: Node) -> None:
        self._with_number(node, node.args[0], node.args[1])

    def neg(self, node: Node) -> None:
        v = self.block.val(node.args[0], node)
        self._map(node, [v.stream], 'affine(scale="-1.0")', v.dtype, v.vector,
                  per_tile=v.per_tile, like=v)

    def unary(self, node: Node) -> None:
        v = self.block.val(node.args[0], node)
        self._map(node, [v.stream], UNARY[node.op], v.dtype, v.vector, per_tile=v.per_tile,
                  like=v)

    def gelu(self, node: Node) -> None:
        v = self.block.val(node.args[0], node)
        approx = node.kwargs.get("approximate", "none")
        fn = "gelu" if approx == "none" else f'gelu(approximate="{approx}")'
        self._map(node, [v.stream], fn, v.dtype, v.vector, per_tile=v.per_tile, like=v)

    def pow(self, node: Node) -> None:
        v, e = self.block.val(node.args[0], node), node.args[1]
        if isinstance(e, (Node, bool)) or not isinstance(e, (int, float)):
            raise fail(node, "a tensor exponent (stepc raises to a number)")
        if not math.isfinite(e):
            raise fail(node, f"the exponent {e!r} (STeP's pow takes finite numbers)")
        self._map(node, [v.stream], f'pow(exponent="{_number(e)}")', v.dtype, v.vector,
                  per_tile=v.per_tile, like=v)

    def sqrt(self, node: Node) -> None:
        v = self.block.val(node.args[0], node)
        self._map(node, [v.stream], 'pow(exponent="0.5")', v.dtype, v.vector,
                  per_tile=v.per_tile, like=v)

    # ---------------------------------------------------------------- reductions
    def reduce(self, node: Node) -> None:
        v = self.block.val(node.args[0], node)
        dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        dims = [dims] if isinstance(dims, int) else list(dims or [])
        last = len(v.shape) - 1
        if v.vector or [d % len(v.shape) for d in dims] != [last]:
            raise fail(node, f"a reduction over dims {dims or 'all'} of {list(v.shape)} "
                             "(stepc reduces the last dim of each row)")
        if node.kwargs.get("dtype") is not None:
            raise fail(node, "a reduction with dtype= (cast its input instead)")
        self._map(node, [v.stream], REDUCTIONS[node.op], v.dtype, vector=not keepdim,
                  comment=f"{v.tiles} of [TB, 1]", like=v)

    def rms_norm(self, node: Node) -> None:
        x = self.block.val(node.args[0], node)
        shape, wp = node.args[1], node.args[2] if len(node.args) > 2 else None
        eps = node.args[3] if len(node.args) > 3 else node.kwargs.get("eps")
        if list(shape) != [x.cols] or x.vector:
            raise fail(node, f"normalized_shape {list(shape)} (stepc normalises the last dim)")
        if eps is None:
            raise fail(node, "eps=None (the dtype's machine epsilon); give the module an eps")
        base = node.site.module or node.name
        r, n = self.w.name(f"{base}_inv"), self.w.name(f"{base}_n")
        self.w.stmt(f'{r} = Map({x.stream}, fn=rms_inv(eps="{eps!r}"))',
                    f"{x.tiles} of [TB, 1]: 1/sqrt(mean(x^2) + eps)")
        self.w.stmt(f"{n} = Map({x.stream}, {r}, fn=mul)", f"{x.tiles} of [TB, {x.cols}]")
        if wp is None:
            self.block.vals[node.name] = Val(n, node.shape, x.dtype, **x.layout())
            return
        wl = (self._param_rows(wp, node, x.heads) if wp.op == "param"  # or computed from one
              else self.block.val(wp, node).stream)
        y = self.w.name(base)
        self.w.stmt(f"{y} = Map({n}, {wl}, fn=mul)", f"{x.tiles} of [TB, {x.cols}]")
        self.block.vals[node.name] = Val(y, node.shape, x.dtype, **x.layout())

    def layer_norm(self, node: Node) -> None:
        """`(x - mean) * rsqrt(var + eps) * weight + bias`, in f32 (as torch computes it)."""
        x = self.block.val(node.args[0], node)
        shape, wp, bp, eps = (list(node.args[1:5]) + [None] * 4)[:4]
        if list(shape) != [x.cols] or x.vector or x.per_tile:
            raise fail(node, f"normalized_shape {list(shape)} (stepc normalises the last dim)")
        base = node.site.module or node.name
        f32 = ", dtype=f32" if x.dtype != "f32" else ""
        m, c, sq, v, r = (self.w.name(f"{base}_{k}") for k in ("mean", "c", "sq", "var", "inv"))
        self.w.stmt(f"{m} = Map({x.stream}, fn=row_mean{f32})", f"{x.tiles} of [TB, 1]")
        self.w.stmt(f"{c} = Map({x.stream}, {m}, fn=sub{f32})", "x - mean")
        self.w.stmt(f'{sq} = Map({c}, fn=pow(exponent="2.0"))')
        self.w.stmt(f"{v} = Map({sq}, fn=row_mean)", f"{x.tiles} of [TB, 1]")
        self.w.stmt(f'{r} = Map({v}, fn=affine(shift="{_number(eps or 0.0)}"))')
        steps = [("rsqrt", None), ("mul", c)] + [(fn, p) for fn, p in (("mul", wp), ("add", bp))
                                                if p is not None]
        out = r
        for i, (fn, other) in enumerate(steps):
            last = i == len(steps) - 1
            dt = f", dtype={node.dtype}" if last and node.dtype != "f32" else ""
            if isinstance(other, Node):  # a parameter, or computed from one (weight + 1)
                other = (self._param_rows(other, node, x.heads) if other.op == "param"
                         else self.block.val(other, node).stream)
            nxt = self.w.name(base if last else f"{base}_{fn}")
            operands = f"{out}, {other}" if other is not None else out
            self.w.stmt(f"{nxt} = Map({operands}, fn={fn}{dt})",
                        f"{x.tiles} of [TB, {x.cols}]" if last else "")
            out = nxt
        self.block.vals[node.name] = Val(out, node.shape, node.dtype, **x.layout())

    def softmax(self, node: Node) -> None:
        x = self.block.val(node.args[0], node)
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        if x.vector or not isinstance(dim, int) or dim % len(x.shape) != len(x.shape) - 1:
            raise fail(node, f"softmax over dim {dim} of {list(x.shape)} (stepc reduces "
                             "the last dim of each row)")
        base = node.name
        m, s, e, d, y = (self.w.name(f"{base}_{k}") for k in ("max", "shift", "exp", "sum", "y"))
        dt = f", dtype={node.dtype}" if node.dtype != x.dtype else ""
        self.w.stmt(f"{m} = Map({x.stream}, fn=row_max)", f"{x.tiles} of [TB, 1]")
        self.w.stmt(f"{s} = Map({x.stream}, {m}, fn=sub{dt})", "x - max")
        self.w.stmt(f"{e} = Map({s}, fn=exp)")
        self.w.stmt(f"{d} = Map({e}, fn=row_sum)", f"{x.tiles} of [TB, 1]")
        self.w.stmt(f"{y} = Map({e}, {d}, fn=div)", f"{x.tiles} of [TB, {x.cols}]")
        self.block.vals[node.name] = Val(y, node.shape, node.dtype, **x.layout())
