"""Capture a PyTorch module as a list of operator nodes: `torch.export` on CPU (or on the
meta device, so that large models need no memory), `torch.fx` symbolic tracing where export
cannot. Every node keeps its module path and the user's source line, for the comments of
the emitted program and for error messages."""

from __future__ import annotations

import contextlib
import io
import logging
import operator
import os
import traceback
import warnings
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import fx

_TORCH_DIR = os.path.dirname(torch.__file__)


class LoweringError(Exception):
    """A module stepc cannot lower; the message names the operator, module path and line."""


class InputRefused(LoweringError):
    """The module or its example inputs, as given, are not something a program can hold (a
    data-dependent size, a zero-size dim, an input the forward does not take): a usage
    error rather than an operator stepc lacks."""


@dataclass
class Site:
    """Where a node comes from: module path (`experts.up_proj`) and `file:line`."""

    module: str
    line: str

    def __str__(self) -> str:
        where = f"module `{self.module}`" if self.module else "the top-level module"
        return f"{where} ({self.line})" if self.line else where


@dataclass
class Node:
    """One captured operation: a canonical op name, its arguments (Nodes or constants)."""

    name: str
    op: str  # "input", "param", "output", or an operator name (aten's, without overload)
    args: tuple = ()
    shape: tuple = ()
    dtype: str = "f32"
    site: Site = field(default_factory=lambda: Site("", ""))
    target: str = ""  # the parameter's state-dict key, or the raw operator for messages
    users: list = field(default_factory=list)
    kwargs: dict = field(default_factory=dict)


_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16",
           torch.int64: "u64", torch.int32: "i32", torch.bool: "bool"}


def dtype_name(dt) -> str:
    return _DTYPES.get(dt, str(dt).replace("torch.", ""))


def _user_line(stack: str | None) -> str:
    """The innermost frame of the user's code in a captured stack trace, as `file:line`."""
    if not stack:
        return ""
    last = ""
    for ln in stack.splitlines():
        ln = ln.strip()
        if ln.startswith('File "'):
            path = ln[6:ln.index('"', 6)]
            num = ln.split(", line ")[1].split(",")[0] if ", line " in ln else "?"
            if not path.startswith(_TORCH_DIR):
                last = f"{os.path.basename(path)}:{num}"
    return last


def _module_path(meta: dict) -> str:
    stack = meta.get("nn_module_stack") or {}
    paths = [v[0] for v in stack.values() if v and v[0]]
    return paths[-1] if paths else ""


def capture(module: torch.nn.Module, example_inputs: tuple,
            debug: bool = False) -> list[Node]:
    """The module's operators in execution order (export, else fx). torch's own logging,
    warnings and printed tracebacks are silenced unless `debug`."""
    with quiet(debug):
        try:
            ep = torch.export.export(module, tuple(example_inputs))
        except Exception as export_error:  # export raises many kinds; fall back to fx
            try:
                return _from_fx(module, example_inputs)
            except LoweringError:
                raise
            except Exception:
                raise LoweringError(f"cannot capture the module: calling it on the example "
                                    f"inputs failed{_where(export_error)}: "
                                    f"{_first_line(export_error)} (torch.export and torch.fx "
                                    "both failed; check the --input shapes and dtypes)") from None
        return _from_export(ep)


@contextlib.contextmanager
def quiet(debug: bool):
    """Nothing from torch on stderr while capturing (its logging, warnings, and the
    tracebacks some of its passes print), unless `debug`."""
    if debug:
        yield
        return
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


def _first_line(e: Exception) -> str:
    text = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return f"{type(e).__name__}: {text[0].strip()}" if text else type(e).__name__


def _where(e: BaseException) -> str:
    """` at file:line` of the innermost user frame (outside torch) of an exception."""
    frames = traceback.extract_tb(e.__traceback__)
    here = os.path.dirname(__file__)
    user = [f for f in frames if not f.filename.startswith((_TORCH_DIR, here))
            and "importlib" not in f.filename]
    return f" at {os.path.basename(user[-1].filename)}:{user[-1].lineno}" if user else ""


def _from_export(ep) -> list[Node]:
    sig = ep.graph_signature
    params = {**sig.inputs_to_parameters, **sig.inputs_to_buffers}
    nodes: dict[str, Node] = {}
    out: list[Node] = []
    for n in ep.graph.nodes:
        val = n.meta.get("val")
        site = Site(_module_path(n.meta), _user_line(n.meta.get("stack_trace")))
        shape = _static_shape(val, n, site) if hasattr(val, "shape") else ()
        dtype = dtype_name(val.dtype) if hasattr(val, "dtype") else ""
        if n.op == "placeholder":
            kind = "param" if n.name in params else "input"
            node = Node(n.name, kind, (), shape, dtype, site, params.get(n.name, n.name))
        elif n.op == "output":
            node = Node(n.name, "output", tuple(_map(a, nodes) for a in n.args[0]))
        elif n.op == "call_function":
            if n.target is operator.getitem:
                op = "getitem"
            else:
                op = str(getattr(n.target, "_opname", None)
                         or getattr(n.target, "__name__", n.target))
            if op == "_assert_tensor_metadata":
                continue
            node = Node(n.name, op, tuple(_map(a, nodes) for a in n.args), shape, dtype, site,
                        str(n.target))
            node.kwargs = {k: _map(v, nodes) for k, v in n.kwargs.items()}
        else:
            raise LoweringError(f"unsupported graph node `{n.op}` ({n.name}) in {site}")
        nodes[n.name] = node
        out.append(node)
    return link_users(out)


def _static_shape(val, n, site: Site) -> tuple:
    """The node's shape as integers; a dim known only when the operator runs (`nonzero`,
    `masked_select`) is refused."""
    try:
        return tuple(int(d) for d in val.shape)
    except RuntimeError:  # torch's GuardOnDataDependentSymNode
        op = getattr(n.target, "_opname", None) or str(n.target)
        raise InputRefused(f"aten.{op} in {site}: its result's size depends on the values "
                           f"of its input ({list(val.shape)}), known only when it runs; a "
                           "STeP program's shapes are fixed when it is written") from None


def _map(a, nodes):
    if isinstance(a, fx.Node):
        return nodes[a.name]
    if isinstance(a, (list, tuple)):
        return type(a)(_map(x, nodes) for x in a)
    return a


def _flat(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flat(a)
        else:
            yield a


# torch-level operations of an fx trace, by the aten name the export path uses
_FX_FUNCTIONS = {F.linear: "linear", torch.matmul: "matmul", operator.matmul: "matmul",
                 F.silu: "silu", F.gelu: "gelu", F.relu: "relu", torch.relu: "relu",
                 torch.mul: "mul", operator.mul: "mul",
                 torch.add: "add", operator.add: "add", torch.softmax: "softmax",
                 F.softmax: "softmax", F.rms_norm: "rms_norm"}
_FX_MODULES = {torch.nn.Linear: "linear", torch.nn.SiLU: "silu", torch.nn.GELU: "gelu",
               torch.nn.ReLU: "relu",
               torch.nn.RMSNorm: "rms_norm", torch.nn.Softmax: "softmax"}


def _from_fx(module: torch.nn.Module, example_inputs: tuple) -> list[Node]:
    """fx symbolic tracing; shapes from one CPU run of the traced graph."""
    tracer = fx.Tracer()
    tracer.record_stack_traces = True
    graph = tracer.trace(module)
    gm = fx.GraphModule(module, graph)
    fx.passes.shape_prop.ShapeProp(gm).propagate(*example_inputs)
    nodes: dict[str, Node] = {}
    out: list[Node] = []
    state = dict(module.named_parameters())
    for n in graph.nodes:
        tm = n.meta.get("tensor_meta")
        shape = tuple(tm.shape) if tm is not None and hasattr(tm, "shape") else ()
        dtype = dtype_name(tm.dtype) if tm is not None and hasattr(tm, "dtype") else ""
        site = Site(n.target if n.op == "call_module" else "", _user_line(n.stack_trace))
        args = tuple(_map(a, nodes) for a in n.args)
        if n.op == "placeholder":
            node = Node(n.name, "input", (), shape, dtype, site, n.name)
        elif n.op == "get_attr":
            node = Node(n.name, "param", (), tuple(state[n.target].shape),
                        dtype_name(state[n.target].dtype), site, n.target)
        elif n.op == "output":
            res = n.args[0]
            node = Node(n.name, "output", tuple(_map(a, nodes) for a in
                                                (res if isinstance(res, tuple) else (res,))))
        elif n.op == "call_module":
            sub = module.get_submodule(n.target)
            op = _FX_MODULES.get(type(sub))
            if op is None:
                raise LoweringError(f"unsupported module {type(sub).__name__} in {site}")
            extra = []
            for pname in ("weight", "bias"):
                p = getattr(sub, pname, None)
                if isinstance(p, torch.nn.Parameter):
                    key = f"{n.target}.{pname}"
                    pn = Node(key.replace(".", "_"), "param", (), tuple(p.shape),
                              dtype_name(p.dtype), site, key)
                    out.append(pn)
                    extra.append(pn)
            if op == "rms_norm":
                args = (args[0], list(sub.normalized_shape), *extra, sub.eps)
            elif op == "softmax":
                args = (args[0], sub.dim)
            elif op != "gelu":
                args = (*args, *extra)
            node = Node(n.name, op, args, shape, dtype, site, type(sub).__name__,
                        kwargs={"approximate": sub.approximate} if op == "gelu" else {})
        elif n.op in ("call_function", "call_method"):
            op = _FX_FUNCTIONS.get(n.target, n.target if n.op == "call_method" else
                                   getattr(n.target, "__name__", str(n.target)))
            node = Node(n.name, op, args, shape, dtype, site, str(n.target))
            node.kwargs = {k: _map(v, nodes) for k, v in n.kwargs.items()}
        else:  # pragma: no cover - fx has no other node kinds
            raise LoweringError(f"unsupported graph node `{n.op}` in {site}")
        nodes[n.name] = node
        out.append(node)
    return link_users(out)


def link_users(nodes: list[Node]) -> list[Node]:
    """Record on each node the nodes that take it as an argument."""
    for node in nodes:
        for a in _flat(node.args):
            if isinstance(a, Node):
                a.users.append(node)
    return nodes


def forward_tensors(obj, caches: bool = True):
    """The tensors of forward arguments: tensors, in tuples and lists, and (with `caches`) a
    transformers KV cache's keys and values."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from forward_tensors(x, caches)
    elif caches and hasattr(obj, "layers"):  # a transformers Cache: its layers' keys, values
        for layer in obj.layers:
            yield from forward_tensors([getattr(layer, "keys", None),
                                        getattr(layer, "values", None)])
