"""Layout bookkeeping of a dense block's activations: views, reshapes, casts and
transposes that only relabel dims keep the stream; attention's split of the last dim into
heads (`view(*input_shape, -1, head_dim)`) regroups each row tile's columns into one tile
per head, `[MT, H] of [TB, Dh]`, which a `transpose(1, 2)` only relabels and a reshape
back to `[.., H * Dh]` merges; anything that moves data between rows and columns is
refused by name and line."""

from __future__ import annotations

import math

from stepc.torch.canon import rows_cols
from stepc.torch.capture import Node
from stepc.torch.dense_block import DenseBlock, Handler, Val, fail


class LayoutOps:
    """The layout operators of a dense block; a transpose of a weight is recorded in the
    block's weight views."""

    def __init__(self, block: DenseBlock):
        self.block, self.w = block, block.w

    def handlers(self) -> dict[str, Handler]:
        """Each aten operator this part lowers, with its lowering."""
        return {"view": self.view, "cast": self.cast, "transpose": self.transpose,
                "getitem": self.getitem, "split": self.split}

    def view(self, node: Node) -> None:
        src = node.args[0]
        if self.block.param_view(src) is not None:
            raise fail(node, "a reshape of a parameter (stepc reads weights in their "
                             "declared shape)")
        v = self.block.val(src, node)
        rows, cols = rows_cols(node.shape)
        if v.heads:
            self._view_heads(node, v)
        elif self._splits_heads(node, v):
            self.block.vals[node.name] = self._split_heads(node, v)
        elif not v.vector and (rows, cols) == (v.rows, v.cols):
            self.block.vals[node.name] = Val(v.stream, node.shape, v.dtype)
        elif v.cols == 1 and math.prod(node.shape) == v.rows:
            # [R] <-> [R, 1]: a reduced row vector gains or loses its unit dim
            vector = not node.shape or node.shape[-1] != 1 or rows != v.rows
            self.block.vals[node.name] = Val(v.stream, node.shape, v.dtype, vector)
        else:
            raise fail(node, f"a reshape of {list(v.shape)} to {list(node.shape)} moves data "
                             "across the last dim (stepc streams rows of it)")

    @staticmethod
    def _splits_heads(node: Node, v: Val) -> bool:
        """A view `[.., C] -> [.., H, Dh]` with C = H * Dh, the rows kept (attention's
        `view(*input_shape, -1, head_dim)`)."""
        shape = node.shape
        return (not v.vector and not v.per_tile and len(shape) >= 3 and 1 < shape[-2]
                and shape[-2] * shape[-1] == v.cols and math.prod(shape[:-2]) == v.rows)

    def _split_heads(self, node: Node, v: Val) -> Val:
        """`[MT] of [TB, H * Dh]` -> `[MT, H] of [TB, Dh]`: each tile's columns streamed
        out, regrouped per head and gathered into one tile per head."""
        heads, dh = node.shape[-2], node.shape[-1]
        base = node.site.module or node.name
        cols, grouped, flat, out = (self.w.name(f"{base}_{k}")
                                    for k in ("cols", "grouped", "flat", "heads"))
        self.w.blank(f"{base}: view {list(v.shape)} -> {list(node.shape)}, split into heads"
                     + (f" ({node.site.line})" if node.site.line else ""))
        self.w.stmt(f'{cols} = FlatMap({v.stream}, fn=retile_streamify(split="col"))',
                    f"[MT * {v.cols}] of [TB, 1]")
        self.w.stmt(f"{grouped}, _ = Reshape({cols}, chunk={dh})",
                    f"[MT * {heads}, {dh}] of [TB, 1]")
        self.w.stmt(f"{flat} = Accum({grouped}, fn=retile_col, rank=1)",
                    f"[MT * {heads}] of [TB, {dh}]")
        self.w.stmt(f"{out}, _ = Reshape({flat}, chunk={heads})", f"[MT, {heads}] of [TB, {dh}]")
        return Val(out, node.shape, v.dtype, heads=heads, heads_at=len(node.shape) - 2)

    def merge_heads(self, v: Val, node: Node) -> Val:
        """`[MT, H] of [TB, Dh]` -> `[MT] of [TB, H * Dh]`, the heads side by side."""
        out = self.w.name(f"{node.site.module or node.name}_merged")
        cols = v.heads * v.cols
        self.w.stmt(f"{out} = Accum({v.stream}, fn=retile_col, rank=1)",
                    f"[MT] of [TB, {cols}]: heads merged")
        return Val(out, tuple(v.shape[:-2]) + (cols,), v.dtype)

    def _view_heads(self, node: Node, v: Val) -> None:
        """A view of a value split into heads: the same shape, or the heads merged back
        (`[.., H, Dh] -> [.., H * Dh]`, with H just before the last dim)."""
        shape = tuple(node.shape)
        if shape == tuple(v.shape):
            self.block.vals[node.name] = Val(v.stream, shape, v.dtype, v.vector, **v.layout())
        elif v.heads_at == len(v.shape) - 2 and shape == tuple(v.shape[:-2]) + (
                v.heads * v.cols,) and not v.vector:
            self.block.vals[node.name] = self.merge_heads(v, node)
        else:
            raise fail(node, f"a reshape of {list(v.shape)} (split into {v.heads} heads at "
                             f"dim {v.heads_at}) to {list(node.shape)} moves data between "
                             "heads and rows (stepc merges the heads back only from "
                             "[.., heads, head_dim])")

    def cast(self, node: Node) -> None:
        """The stream is unchanged; its consumers compute in the cast's dtype."""
        v = self.block.val(node.args[0], node)
        self.block.vals[node.name] = Val(v.stream, node.shape, v.dtype, v.vector, **v.layout())

    def transpose(self, node: Node) -> None:
        src = node.args[0]
        pv = self.block.param_view(src)
        if pv is not None and (len(node.shape) == 2 or (  # W.t(); W.transpose(1, 2)
                len(node.shape) == 3 and self._perm(node, 3) == [0, 2, 1])):
            self.block.transposed[node.name] = (pv[0], not pv[1])
            return
        v = self.block.val(src, node)
        perm = self._perm(node, len(v.shape))
        # the heads are a stream dim of their own: moving them past the rows relabels
        moved = [d for d in perm if v.shape[d] != 1 and not (v.heads and d == v.heads_at)]
        if moved != sorted(moved) or node.shape[-1] != v.shape[-1]:
            raise fail(node, f"a transpose of the activation {list(v.shape)} to "
                             f"{list(node.shape)} reorders its rows or columns")
        self.block.vals[node.name] = Val(v.stream, node.shape, v.dtype, v.vector,
                                         heads=v.heads, heads_at=perm.index(v.heads_at)) \
            if v.heads else Val(v.stream, node.shape, v.dtype, v.vector)

    @staticmethod
    def _perm(node: Node, ndim: int) -> list[int]:
        """The permutation of a transpose/permute/t node."""
        args = node.args[1:]
        if "permute" in node.target:
            return [d % ndim for d in args[0]]
        perm = list(range(ndim))
        if "numpy_T" in node.target:  # x.T: every dim reversed
            return perm[::-1]
        if ".mT" in node.target:  # x.mT: the last two swapped
            return perm[:-2] + perm[:-3:-1]
        a, b = (args[0] % ndim, args[1] % ndim) if len(args) >= 2 else (0, 1)
        perm[a], perm[b] = perm[b], perm[a]
        return perm

    def getitem(self, node: Node) -> None:
        raise fail(node, "an element of a multi-output operator")

    def split(self, node: Node) -> None:
        raise fail(node, "a split of an activation's columns, other than the gate and up "
                         "halves of a fused projection feeding a SwiGLU "
                         "(`down(silu(gate) * up)`)")
