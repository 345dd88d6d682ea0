"""What names are bound to during elaboration: streams, pending feedback streams, graphs,
params and loop variables, in nested scopes (loop iterations, graph instances)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stepc.grammar import ast
from stepc.graph.program import Cluster, TypeAnnotation
from stepc.ops.base import FnValue, TensorRef
from stepc.source import Span


@dataclass(frozen=True)
class StreamVal:
    """A stream produced by a node port (or, while pending, by a feedback declaration)."""

    node: str
    port: int
    name: str


@dataclass
class Pending:
    """A declared feedback stream not yet bound to a producer."""

    name: str
    annotation: TypeAnnotation
    span: Span
    bound: StreamVal | None = None
    failed: bool = False  # its binding statement had errors (already reported)


class Poison:
    """The value of a binding whose statement failed: uses of it fail silently."""


POISON = Poison()


@dataclass
class GraphVal:
    definition: ast.GraphDef
    scope: Scope


@dataclass
class Entry:
    value: Any
    kind: str  # param | tensor | stream | array | graph | loopvar | value
    span: Span | None
    used: bool = False


@dataclass
class Scope:
    parent: Scope | None
    prefix: str = ""  # node-name prefix: "e[3]."
    suffix: str = ""  # loop-iteration suffix: "[3]"
    cluster: tuple[Cluster, ...] = ()
    names: dict[str, Entry] = field(default_factory=dict)
    returned: Any = None
    has_return: bool | None = None  # None: not inside a graph body
    is_loop: bool = False

    def lookup(self, name: str) -> Entry | None:
        s: Scope | None = self
        while s is not None:
            if name in s.names:
                return s.names[name]
            s = s.parent
        return None

    def visible(self) -> list[str]:
        out: list[str] = []
        s: Scope | None = self
        while s is not None:
            out.extend(s.names)
            s = s.parent
        return out

    def int_env(self) -> tuple[tuple[str, int], ...]:
        env: dict[str, int] = {}
        s: Scope | None = self
        while s is not None:
            for k, e in s.names.items():
                if e.kind in ("param", "loopvar") and k not in env and \
                        isinstance(e.value, int):  # not a poisoned (failed) param
                    env[k] = e.value
            s = s.parent
        return tuple(sorted(env.items()))





def kind_word(v: Any) -> str:
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, (StreamVal, Pending)):
        return "a stream"
    if isinstance(v, TensorRef):
        return "a tensor"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, tuple):
        return f"{len(v)} values"
    if isinstance(v, FnValue):
        return "a function"
    if isinstance(v, GraphVal):
        return "a graph"
    if v is None:
        return "nothing (the call has no output)"
    return type(v).__name__
