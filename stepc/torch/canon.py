"""Canonicalisation of a captured graph before lowering: operators that do not compute
(copies, dropout in eval, same-dtype casts) disappear, their users reading the source;
dtype casts become `cast` nodes and every view, reshape, squeeze, unsqueeze and transpose a
`view` or `transpose` node, which the lowering treats as layout bookkeeping; aten's
spellings of one operation get one name.

After this pass `Node.op` is one of the kinds a lowering handles, or an unsupported kind
that `unsupported()` lists with every site where it occurs.
"""

from __future__ import annotations

import math

from stepc.torch.capture import LoweringError, Node, link_users

# operators that only copy or relabel their first argument (dropout: in eval mode)
PASS_THROUGH = ("contiguous", "clone", "alias", "detach", "lift_fresh_copy", "dropout",
                "feature_dropout", "alpha_dropout")
CASTS = ("to", "_to_copy", "type_as")
VIEWS = ("view", "reshape", "_unsafe_view", "unsqueeze", "squeeze", "flatten", "unflatten",
         "expand", "view_as", "reshape_as")
TRANSPOSES = ("t", "transpose", "permute", "swapaxes", "numpy_T", "mT")
SPLITS = ("chunk", "split", "split_with_sizes")
SPELLINGS = {"_softmax": "softmax", "true_divide": "div", "multiply": "mul", "subtract": "sub",
             "square": "pow"}

# what canonicalisation does with each kind, for the support table
LAYOUT_KINDS = {
    ", ".join(PASS_THROUGH): "nothing: users read the source (dropout only in eval mode)",
    ", ".join(CASTS): "nothing when the dtype is unchanged; else the next operator's "
                      "`dtype=`, or `Map(cast)` before the output",
    ", ".join(VIEWS): "nothing when the last dim is kept and the rows are only relabelled "
                      "(`[batch, seq, hidden]` folds to `[batch * seq, hidden]`); a split of "
                      "the last dim into heads `[.., H, Dh]` streams `[MT, H] of [TB, Dh]` "
                      "(`FlatMap(retile_streamify)`, `Reshape`, `Accum(retile_col)`), merged "
                      "back by `Accum(retile_col)`; else refused",
    ", ".join(TRANSPOSES): "a weight's transpose is read by `matmul(transpose=true)`; an "
                           "activation's when it moves unit dims or the heads dim "
                           "(`transpose(1, 2)` of `[B, S, H, Dh]`), else refused",
}


def canonicalise(nodes: list[Node]) -> list[Node]:
    """`nodes` with pass-through operators removed and the rest renamed (see the module
    docstring); users lists are rebuilt."""
    source: dict[str, Node] = {}

    def resolve(a):
        if isinstance(a, Node):
            return source.get(a.name, a)
        if isinstance(a, (list, tuple)):
            return type(a)(resolve(x) for x in a)
        return a

    out = []
    for n in nodes:
        n.args = tuple(resolve(a) for a in n.args)
        n.kwargs = {k: resolve(v) for k, v in n.kwargs.items()}
        first = n.args[0] if n.args else None
        op = SPELLINGS.get(n.op, n.op)
        training = op.endswith("dropout") and (n.args[2] if len(n.args) > 2
                                               else n.kwargs.get("train", False))
        if op in PASS_THROUGH and isinstance(first, Node) and not training:
            source[n.name] = first  # dropout in training mode stays, and is refused
            continue
        if op in CASTS and isinstance(first, Node):
            if n.dtype == first.dtype or first.op == "param":
                source[n.name] = first
                continue
            op = "cast"
        elif op in VIEWS:
            op = "view"
        elif op in TRANSPOSES:
            op = "transpose"
        if n.op == "square":
            n.args = (first, 2)
        if op in SPLITS and isinstance(first, Node):
            n.kwargs = {"sizes": _split_sizes(n, first), "dim": _arg(n, 2, "dim", 0)}
            op = "split"
        n.op = op
        out.append(n)
    for n in out:
        n.users = []
    return link_users(out)


def _arg(n: Node, i: int, name: str, default):
    return n.args[i] if len(n.args) > i else n.kwargs.get(name, default)


def _split_sizes(n: Node, src: Node) -> list[int]:
    """The sizes of the pieces of a chunk/split along its dim."""
    dim = _arg(n, 2, "dim", 0) % max(len(src.shape), 1)
    total = src.shape[dim]
    what = _arg(n, 1, "split_sizes" if n.op == "split_with_sizes" else "split_size", None)
    if n.op == "chunk":
        step = -(-total // what)  # torch's chunk: pieces of ceil(total / chunks)
        return [min(step, total - i) for i in range(0, total, step)]
    if isinstance(what, int):
        return [min(what, total - i) for i in range(0, total, what)]
    return list(what)


def unsupported(nodes: list[Node], supported) -> LoweringError | None:
    """One error listing every operator kind without a lowering, each with its sites."""
    sites: dict[str, list[str]] = {}
    for n in nodes:
        if n.op not in ("input", "param", "output", "getitem") and not supported(n.op):
            where = sites.setdefault(n.op, [])
            if str(n.site) not in where:
                where.append(str(n.site))
    if not sites:
        return None
    lines = [f"  aten.{op} in {'; '.join(where[:4])}" + (f" and {len(where) - 4} more"
                                                        if len(where) > 4 else "")
             for op, where in sorted(sites.items())]
    kinds = f"{len(sites)} unsupported operator kind{'s' if len(sites) > 1 else ''}"
    return LoweringError(f"cannot lower the module: {kinds}:\n" + "\n".join(lines)
                         + "\n(docs/torch.md lists what stepc lowers)")


def rows_cols(shape: tuple, vector: bool = False) -> tuple[int, int]:
    """The row-stream layout of a tensor: leading dims folded into rows, the last dim the
    columns (a reduction without keepdim: every dim is rows, one column)."""
    if vector or not shape:
        return math.prod(shape), 1
    return math.prod(shape[:-1]), shape[-1]
