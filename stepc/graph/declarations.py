"""Declarations: tensors (element type, role, shape, data source) and streams declared with
`stream NAME : TYPE` (external streams with their generated default data, feedback streams
bound later), elaborated into the program's tensors and External nodes; and the rule that
places a file an import or a `file(path=...)` names."""

from __future__ import annotations

import os
import zlib

from stepc.codes import (
    BAD_ARGUMENT,
    MISSING_ARGUMENT,
    NON_POSITIVE_DIM,
    TILE_DOES_NOT_FIT,
    UNBOUND_DECLARED_STREAM,
    UNKNOWN_FUNCTION,
    UNKNOWN_TYPE_OR_ROLE,
)
from stepc.diagnostics import did_you_mean
from stepc.grammar import ast
from stepc.graph.bindings import Binder
from stepc.graph.calls import Calls
from stepc.graph.draft import Draft
from stepc.graph.program import Tensor, TypeAnnotation
from stepc.graph.scope import Pending, Scope, StreamVal
from stepc.graph.values import Evaluator
from stepc.ops.base import FnValue
from stepc.types import DTYPE_BYTES

TENSOR_ROLES = ("input", "weight", "output", "scratch")
TENSOR_SOURCES = {"random": ("seed", "high"), "zeros": (), "ones": (), "arange": (),
                  "file": ("path",)}
EXTERNAL_GENERATOR = ("topk", "seed", "mean", "std", "file", "multihot")  # default data
# values of integer-tile external streams (KV lengths), generated (`mean=`) or traced: longer
# requests never finish a run
MAX_KV_LENGTH = 10_000_000


def import_path(importer: str | None, path: str) -> str:
    """The file an `import "path"` (or a `file(path=...)` source) names: relative to the
    directory of the file that writes it (the current directory for standard input)."""
    base = os.path.dirname(importer) if importer and not importer.startswith("<") else ""
    return os.path.normpath(os.path.join(base, path))



class Declarations:
    """The declaration statements: tensors into the `Draft`'s table, streams as External
    nodes, feedback streams pending, a declared stream with a value as a binding."""

    def __init__(self, draft: Draft, evaluator: Evaluator, calls: Calls, binder: Binder):
        self.draft, self.evaluator, self.calls, self.binder = draft, evaluator, calls, binder

    def do_tensor(self, s: ast.TensorDecl, scope: Scope) -> None:
        if s.dtype not in DTYPE_BYTES:
            raise self.draft.error(UNKNOWN_TYPE_OR_ROLE, f"unknown element type `{s.dtype}`"
                                   + did_you_mean(s.dtype, DTYPE_BYTES), s.dtype_span)
        if s.role not in TENSOR_ROLES:
            raise self.draft.error(UNKNOWN_TYPE_OR_ROLE,
                                   f"unknown tensor role `{s.role}` (expected one of "
                             f"{', '.join(TENSOR_ROLES)})" + did_you_mean(s.role, TENSOR_ROLES),
                                   s.role_span)
        shape = []
        for d in s.dims:
            v = self.evaluator.eval_int(d, scope)
            if v <= 0:
                raise self.draft.error(NON_POSITIVE_DIM,
                                       f"tensor dims must be positive, found {v}", d.span)
            shape.append(v)
        if not shape:
            raise self.draft.error(TILE_DOES_NOT_FIT,
                                   f"tensor `{s.name}` needs at least one dim", s.span)
        source = None
        if s.source is not None:
            source = self.tensor_source(s.source, scope)
        elif s.role in ("input", "weight"):
            source = FnValue("random", (("seed", zlib.crc32(s.name.encode()) % 2**31),), None)
        t = Tensor(s.name, s.dtype, tuple(shape), s.role, source, s.name_span)
        self.binder.define(scope, s.name, t, "tensor", s.name_span)
        self.draft.tensors[s.name] = t

    def tensor_source(self, e: ast.Expr, scope: Scope) -> FnValue:
        if isinstance(e, ast.Name):
            e = ast.Call(e.name, (), e.span, e.span)
        if not isinstance(e, ast.Call) or e.func not in TENSOR_SOURCES:
            name = e.func if isinstance(e, ast.Call) else ""
            raise self.draft.error(UNKNOWN_FUNCTION, "unknown tensor data source"
                                   + (f" `{name}`" if name else "") + " (expected "
                                   + ", ".join(f"{k}(...)" for k in TENSOR_SOURCES) + ")"
                                   + did_you_mean(name, TENSOR_SOURCES), e.span)
        source = self.calls.fn_value(e, scope, allowed=TENSOR_SOURCES[e.func])
        path = source.get("path")
        if isinstance(path, str):  # `file(path=...)`: relative to the declaring file, as imports
            source = FnValue(source.name, tuple(
                (k, import_path(self.draft.import_stack[-1], v) if k == "path" else v)
                for k, v in source.kwargs), source.span)
        return source

    def do_stream_decl(self, s: ast.StreamDecl, scope: Scope) -> None:
        self.evaluator.mark_used(s.type, scope)
        ann = TypeAnnotation(s.type, scope.int_env())
        if s.source is None:
            if s.type.dims is None:
                raise self.draft.error(UNBOUND_DECLARED_STREAM,
                                       f"feedback stream `{s.name}` needs a full type with "
                                       "a shape: Strm<T, r>[dims]", s.type.span)
            p = Pending(s.name, ann, s.name_span)
            self.draft.pendings.append(p)
            self.binder.define(scope, s.name, p, "stream", s.name_span)
            return
        src = s.source
        if isinstance(src, ast.Call) and src.func == "external":
            if not src.args or src.args[0].name is not None or \
                    not isinstance(src.args[0].value, ast.StrLit):
                raise self.draft.error(MISSING_ARGUMENT,
                                       'external streams are written `external("name")` '
                                       "(optionally with generator settings: topk=, seed=, "
                                       "mean=, std=, file=, multihot=)", src.span)
            gen = dict(self.calls.fn_value(ast.Call("external", src.args[1:], src.span,
                                                    src.func_span), scope,
                                           allowed=EXTERNAL_GENERATOR).kwargs)
            self.check_generator(gen, src)
            if isinstance(gen.get("file"), str):  # relative to the declaring file
                gen["file"] = import_path(self.draft.import_stack[-1], gen["file"])
            if s.type.dims is None:
                raise self.draft.error(UNBOUND_DECLARED_STREAM,
                                       f"external stream `{s.name}` needs a full type with "
                                       "a shape: Strm<T, r>[dims]", s.type.span)
            node = self.draft.new_node("External", s.name, scope, src.span, s.name_span,
                                       {"name": src.args[0].value.value, "type": ann, "gen": gen},
                                       [], {})
            v = StreamVal(node.name, 0, s.name)
            node.port_names[0], node.port_spans[0] = s.name, s.name_span
            self.binder.define(scope, s.name, v, "stream", s.name_span)
            return
        b = ast.Binding((ast.Target(s.name, (), s.name_span),), s.type, src, s.span)
        self.binder.do_binding(b, scope)

    def check_generator(self, gen: dict, call: ast.Call) -> None:
        """The settings of an external stream's generated data, each in the range the
        generator can draw from: E0204 at the argument otherwise."""
        spans = {a.name: a.span for a in call.args if a.name}
        ranges = {"topk": (1, None), "seed": (0, 2**63 - 1), "mean": (1, MAX_KV_LENGTH),
                  "std": (0, MAX_KV_LENGTH)}
        for key, value in gen.items():
            if key not in ranges:  # file=, multihot=: checked where the file is read
                continue
            low, high = ranges[key]
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            integral = key in ("topk", "seed")
            if not number or (integral and not isinstance(value, int)) or \
                    not low <= value <= (high if high is not None else value):
                bounds = f"{low:,}..{high:,}" if high is not None else f">= {low}"
                raise self.draft.error(BAD_ARGUMENT, f"external `{key}=` expects "
                                       f"{'an integer' if integral else 'a number'} in {bounds}, "
                                       f"found {value!r}", spans.get(key, call.span))
