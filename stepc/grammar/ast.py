"""The .step abstract syntax tree: small frozen dataclasses, each with a source span."""

from __future__ import annotations

from dataclasses import dataclass

from stepc.source import Span


# ---------------------------------------------------------------- expressions
@dataclass(frozen=True)
class IntLit:
    value: int
    span: Span


@dataclass(frozen=True)
class StrLit:
    value: str
    span: Span


@dataclass(frozen=True)
class BoolLit:
    value: bool
    span: Span


@dataclass(frozen=True)
class Name:
    name: str
    span: Span


@dataclass(frozen=True)
class Arg:
    name: str | None
    value: Expr
    span: Span


@dataclass(frozen=True)
class Call:
    func: str
    args: tuple[Arg, ...]
    span: Span
    func_span: Span


@dataclass(frozen=True)
class ListLit:
    items: tuple[Expr, ...]
    span: Span


@dataclass(frozen=True)
class Index:
    base: Expr
    index: Expr
    span: Span


@dataclass(frozen=True)
class Neg:
    value: Expr
    span: Span


@dataclass(frozen=True)
class BinOp:
    op: str
    lhs: Expr
    rhs: Expr
    span: Span


Expr = IntLit | StrLit | BoolLit | Name | Call | ListLit | Index | Neg | BinOp


# ---------------------------------------------------------------- types
@dataclass(frozen=True)
class UnknownDim:
    span: Span


Dim = Expr | UnknownDim


@dataclass(frozen=True)
class TileTypeAst:
    dtype: str
    rows: Dim
    cols: Dim
    span: Span
    dtype_span: Span


@dataclass(frozen=True)
class BufferTypeAst:
    tile: TileTypeAst
    dims: tuple[Dim, ...]
    span: Span


@dataclass(frozen=True)
class SelectTypeAst:
    kind: str
    n: Expr
    span: Span


@dataclass(frozen=True)
class TupleTypeAst:
    elems: tuple[ElemTypeAst, ...]
    span: Span


@dataclass(frozen=True)
class ScalarTypeAst:
    dtype: str
    span: Span


ElemTypeAst = TileTypeAst | BufferTypeAst | SelectTypeAst | TupleTypeAst | ScalarTypeAst


@dataclass(frozen=True)
class StreamTypeAst:
    elem: ElemTypeAst
    rank: int | None
    dims: tuple[Dim, ...] | None
    span: Span


# ---------------------------------------------------------------- statements
@dataclass(frozen=True)
class Import:
    path: str
    span: Span


@dataclass(frozen=True)
class Param:
    name: str
    value: Expr
    span: Span
    name_span: Span


@dataclass(frozen=True)
class TensorDecl:
    name: str
    dtype: str
    dims: tuple[Expr, ...]
    role: str
    source: Expr | None
    span: Span
    name_span: Span
    dtype_span: Span
    role_span: Span


@dataclass(frozen=True)
class StreamDecl:
    name: str
    type: StreamTypeAst
    source: Expr | None
    span: Span
    name_span: Span


@dataclass(frozen=True)
class Assume:
    lhs: Expr
    op: str
    rhs: Expr
    span: Span


@dataclass(frozen=True)
class ForLoop:
    var: str
    start: Expr
    end: Expr
    body: tuple[Statement, ...]
    span: Span


@dataclass(frozen=True)
class GraphParam:
    name: str
    type: StreamTypeAst | None
    default: Expr | None
    span: Span


@dataclass(frozen=True)
class GraphDef:
    name: str
    params: tuple[GraphParam, ...]
    body: tuple[Statement, ...]
    span: Span
    name_span: Span


@dataclass(frozen=True)
class Return:
    values: tuple[Expr, ...]
    span: Span


@dataclass(frozen=True)
class Target:
    name: str
    indices: tuple[Expr, ...]
    span: Span


@dataclass(frozen=True)
class Binding:
    targets: tuple[Target, ...]
    type: StreamTypeAst | None
    value: Expr
    span: Span


@dataclass(frozen=True)
class CallStatement:
    call: Call
    span: Span


Statement = (Import | Param | TensorDecl | StreamDecl | Assume | ForLoop | GraphDef | Return
             | Binding | CallStatement)


@dataclass(frozen=True)
class Module:
    """One parsed source file."""

    name: str
    statements: tuple[Statement, ...]
