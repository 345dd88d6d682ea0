"""What the parts of a dense block's lowering share: the activation streams (`Val`) by
node, the weights declared, the parameter views (transposes of weights), the writer and
the schedule, and the refusal of a node (`fail`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stepc.torch.canon import rows_cols
from stepc.torch.capture import LoweringError, Node
from stepc.torch.emit import StepWriter

Handler = Callable[[Node], None]  # lowers one node of the op it is registered for


@dataclass
class Val:
    """An activation stream `[MT] of [TB, cols]` holding a tensor of torch shape `shape`."""

    stream: str
    shape: tuple
    dtype: str  # the element type of the stream's tiles
    vector: bool = False  # reduced without keepdim: every dim is rows, one column
    per_tile: bool = False  # computed from a [C] parameter: one [1, C] tile per row tile
    heads: int = 0  # split into heads: `[MT, heads] of [TB, cols]`, the heads dim of the
    heads_at: int = -1  # torch shape at `heads_at` (a view [.., H, Dh], then transposes)

    @property
    def tiles(self) -> str:
        """The stream's shape: `[MT]`, or `[MT, H]` split into heads."""
        return f"[MT, {self.heads}]" if self.heads else "[MT]"

    def layout(self) -> dict:
        """The head split, for a value computed from this one."""
        return {"heads": self.heads, "heads_at": self.heads_at}

    @property
    def rows(self) -> int:
        return rows_cols(self.shape, self.vector)[0]

    @property
    def cols(self) -> int:
        return rows_cols(self.shape, self.vector)[1]


def fail(node: Node, why: str) -> LoweringError:
    return LoweringError(f"unsupported: aten.{node.op} in {node.site}: {why}")


class DenseBlock:
    """The state of one dense block's lowering, written by every part of it."""

    def __init__(self, w: StepWriter, rows: int, tb: int, tile_f: int):
        self.w, self.rows, self.tb, self.tile_f = w, rows, tb, tile_f
        self.vals: dict[str, Val] = {}
        self.transposed: dict[str, tuple[Node, bool]] = {}  # weight views: (param, transposed)
        self.tensors: dict[str, str] = {}  # program tensor -> state-dict key or input name
        self.weights_declared: dict[tuple, str] = {}

    def weight(self, p: Node, shape: list[int] | None = None) -> str:
        if p.op != "param":
            raise fail(p, "expected a parameter")
        shape = list(shape or p.shape)
        key = (p.target, tuple(shape))
        if key in self.weights_declared:
            return self.weights_declared[key]
        name = self.w.name(p.target.replace(".", "_"))
        self.w.tensor(name, f"{p.dtype}{shape} weight = random(seed={len(self.w.tensors) + 1})",
                      f"{p.target} {list(p.shape)}")
        self.tensors[name] = p.target
        self.weights_declared[key] = name
        return name

    def half_weight(self, p: Node, half: int | None, rows: int) -> str:
        """A weight `[F, D]`, or half `W[h]` of a fused `[2F, D]` one (declared [2, F, D]:
        the same row-major data, its halves indexed by the first dim)."""
        if half is None:
            return self.weight(p)
        return f"{self.weight(p, [2, rows, p.shape[1]])}[{half}]"

    def cols_tiles(self, n: int, node: Node) -> str:
        if n % self.tile_f:
            raise LoweringError(f"{node.site}: {n} columns are not a multiple of TILE_F = "
                                f"{self.tile_f} (choose a TILE_F that divides it)")
        return f"{n} // TILE_F"

    def val(self, a, node: Node) -> Val:
        if not isinstance(a, Node) or a.name not in self.vals:
            raise fail(node, f"operand {getattr(a, 'name', a)!r} is not an activation stream "
                             "(stepc lowers operators on activations and parameters)")
        return self.vals[a.name]

    def param_view(self, a) -> tuple[Node, bool] | None:
        """A parameter, or a transpose of one: (param, transposed)."""
        if isinstance(a, Node) and a.op == "param":
            return a, False
        name = getattr(a, "name", None)
        return self.transposed.get(name) if isinstance(name, str) else None
