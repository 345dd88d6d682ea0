"""The structure of a decoder layer, read from its own forward: which of its submodules it
calls in which order, and where the residual adds sit.

The forward is run once with each direct submodule replaced by a stand-in that returns a
fresh tensor (the attention a pair `(output, None)`, as transformers' attentions return),
on meta tensors, while a torch function mode records what the layer itself computes
between its parts. The result must be a sequence of residual blocks, each
`stream + post(core(pre(stream)))`: a block's core is one part (the attention, then the
MLP or MoE), `pre` and `post` are norms (submodules holding only vectors of the hidden
size), and dropout in eval mode is the identity. So Llama's layer is `[input_layernorm]
self_attn []` then `[post_attention_layernorm] mlp []`, Gemma2's `[input_layernorm]
self_attn [post_attention_layernorm]` then `[pre_feedforward_layernorm] mlp
[post_feedforward_layernorm]`, and Phi-3's dropouts disappear. Anything else the forward
computes on the stream (a scale, a parallel attention and MLP reading the same input) is
refused, naming it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode

from stepc.torch import families, moe_structure
from stepc.torch.capture import InputRefused


class LayerRefused(InputRefused):
    """A decoder layer stepc does not compose (a part no lowering covers, a forward that
    is not residual blocks of norms and parts): a usage error, exit 2 on the command line."""


@dataclass(frozen=True)
class Block:
    """One residual block: `stream + post(core(pre(stream)))`, as attribute names."""

    pre: tuple[str, ...]
    core: str
    post: tuple[str, ...]


@dataclass(frozen=True)
class LayerStructure:
    """A decoder layer as two residual blocks, the attention's and the MLP's."""

    attention: Block
    ffn: Block
    ffn_kind: str  # "moe" or "mlp"

    def parts(self) -> list[tuple[str, str]]:
        """(attribute, kind) of each part in the order the layer runs them: kind "norm",
        "attention", "moe" or "mlp"."""
        out = []
        for block, kind in ((self.attention, "attention"), (self.ffn, self.ffn_kind)):
            out += [(p, "norm") for p in block.pre] + [(block.core, kind)]
            out += [(p, "norm") for p in block.post]
        return out

    def describe(self) -> str:
        """`input_layernorm -> self_attn -> + residual -> ...` for a header."""
        steps = []
        for block in (self.attention, self.ffn):
            steps += [*block.pre, block.core, *block.post, "+ residual"]
        return " -> ".join(steps)


class _Value:
    """What a tensor of the recorded forward is: the layer's input, a part's output or the
    sum of two values."""

    def __init__(self, kind: str, part: str = "", args: tuple = ()):
        self.kind, self.part, self.args = kind, part, args


_ADDS = {"add", "__add__", "__radd__", "__iadd__", "add_"}
_SAME = {"to", "type_as", "contiguous", "clone", "dropout", "view", "reshape", "view_as",
         "reshape_as", "float", "__get__"}


class _Recorder(TorchFunctionMode):
    """Tracks the values of the tensors the layer computes from its input and parts."""

    def __init__(self, values: dict[int, _Value], keep: list):
        super().__init__()
        self.values, self.keep = values, keep

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        tracked = [self.values[id(a)] for a in args
                   if isinstance(a, torch.Tensor) and id(a) in self.values]
        if not tracked or not isinstance(out, torch.Tensor):
            return out
        name = getattr(func, "__name__", str(func))
        if name in _ADDS and len(tracked) == 2 and kwargs.get("alpha", 1) == 1:
            value = _Value("add", args=tuple(tracked))
        elif name in _SAME and len(tracked) == 1 and tuple(out.shape) == tuple(
                args[0].shape) and not _dropping(name, args, kwargs):
            value = tracked[0]
        else:
            value = _Value("op", _op_name(name))
        self.values[id(out)] = value
        self.keep.append(out)
        return out


def _dropping(name: str, args: tuple, kwargs: dict) -> bool:
    """Whether a call of `F.dropout(x, p=0.5, training=True)` drops anything."""
    if name != "dropout":
        return False
    p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
    return bool(kwargs.get("training", args[2] if len(args) > 2 else True)) and p > 0


def _op_name(name: str) -> str:
    """`mul` for `__rmul__` and `__mul__`, as a reader writes it."""
    if name.startswith("__") and name.endswith("__"):
        name = name.strip("_")
        return name[1:] if name[:1] in "ri" and len(name) > 3 else name
    return name


def read_structure(layer: torch.nn.Module, where: str, hidden: int,
                   dtype: torch.dtype) -> LayerStructure:
    """The layer's two residual blocks (see the module docstring), or LayerRefused saying
    what differs."""
    cls = f"{where} ({type(layer).__name__})" if where else type(layer).__name__
    attn = [n for n, sub in layer.named_children() if _attention(sub)]
    if len(attn) != 1:
        what = ("no submodule is an attention" if not attn else
                f"{len(attn)} submodules are attentions ({', '.join(attn)})")
        raise LayerRefused(f"{cls}: {what} that the decode-attention family lowers "
                           f"({', '.join(_attention_classes())}){_unlowered(layer)}")
    value = _record(layer, cls, hidden, dtype, attn[0])
    blocks = _blocks(value, cls)
    cores = [[p for p in chain if not _is_norm(getattr(layer, p), hidden)] for chain in blocks]
    if len(blocks) != 2 or attn[0] not in blocks[0]:
        order = "; ".join(" -> ".join(chain) for chain in blocks)
        raise LayerRefused(f"{cls}: expected two residual blocks, the attention's "
                           f"then the MLP's; its forward runs {len(blocks)}: {order}")
    found = []
    for chain, core in zip(blocks, cores):
        if len(core) != 1:
            raise LayerRefused(f"{cls}: a residual block runs {' -> '.join(chain)}; "
                               "stepc composes norms (modules holding only vectors of the "
                               f"hidden size) around one part, and {len(core)} are not norms"
                               f"{': ' + ', '.join(core) if core else ''}")
        i = chain.index(core[0])
        found.append(Block(tuple(chain[:i]), core[0], tuple(chain[i + 1:])))
    ffn = getattr(layer, found[1].core)
    return LayerStructure(found[0], found[1], ffn_kind(ffn))


_CACHE_ARGS = ("cache", "past_key_values", "past_key_value", "layer_past")


def find(module: torch.nn.Module) -> families.Family | None:
    """The structural decoder family when a child of `module` is an attention the
    decode-attention family lowers (its forward is read when it is lowered). A decoder
    layer whose attention no lowering covers (its forward takes a cache, a child is an
    attention by its class name) is refused, naming it."""
    if any(_attention(c) for c in module.children()):
        return families.STRUCTURAL_DECODER
    try:
        args = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return None
    cache = next((a for a in _CACHE_ARGS if a in args), None)
    if cache and any("Attention" in type(c).__name__ for c in module.children()):
        raise LayerRefused(f"{type(module).__name__} (a decoder layer: its forward takes "
                           f"`{cache}`): no submodule is an attention that the "
                           "decode-attention family lowers "
                           f"({', '.join(_attention_classes())}){_unlowered(module)}")
    return None


def ffn_kind(mlp: torch.nn.Module) -> str:
    """"moe" for a sparse MoE block a family lowers (by class, or by its fused or stacked
    experts), else "mlp" (lowered node by node)."""
    fam = families.find(mlp)
    if fam is not None:
        return "moe" if fam.kind == "moe" else "mlp"
    found = moe_structure.find_experts(mlp)
    return "moe" if found is not None and found[1] in ("fused", "stacked") else "mlp"


def _attention(sub: torch.nn.Module) -> bool:
    fam = families.find(sub)
    return fam is not None and fam.kind == "attention"


def _attention_classes() -> list[str]:
    return [c for fam in families.FAMILIES if fam.kind == "attention" for c in fam.classes]


def _unlowered(layer: torch.nn.Module) -> str:
    """`; its self_attn (GemmaAttention) is not one` for a child named like an attention,
    or why its registered family does not apply."""
    for name, sub in layer.named_children():
        if "attn" in name or "attention" in name or "Attention" in type(sub).__name__:
            m = families.match(sub)
            why = f" ({m.refusal()})" if m is not None and m.override else ""
            return f"; its `{name}` ({type(sub).__name__}) is not one{why}"
    return ""


def _is_norm(sub: torch.nn.Module, hidden: int) -> bool:
    """Whether `sub` holds only vectors of the hidden size, or nothing (OLMo's layer norm
    without a scale): lowered node by node, row by row."""
    return all(tuple(p.shape) == (hidden,) for p in sub.parameters())


def _record(layer, where: str, hidden: int, dtype: torch.dtype, attn: str) -> _Value:
    """Runs the forward with its parts as stand-ins; the value it returns."""
    values: dict[int, _Value] = {}
    keep: list = []
    x = torch.empty(3, 1, hidden, dtype=dtype, device="meta")  # 3: a 2-tuple unpack fails
    values[id(x)] = _Value("input")

    def stand_in(name: str, sub: torch.nn.Module):
        def forward(*args, **kwargs):
            arg = kwargs.get("hidden_states", args[0] if args else None)
            if not isinstance(arg, torch.Tensor) or id(arg) not in values:
                raise LayerRefused(f"{where}: its forward calls "
                                   f"`{name}` on something other than the hidden states")
            if isinstance(sub, torch.nn.Dropout) or isinstance(sub, torch.nn.Identity):
                return arg
            out = torch.empty(arg.shape, dtype=arg.dtype, device="meta")
            values[id(out)] = _Value("call", name, (values[id(arg)],))
            keep.append(out)
            return (out, None) if name == attn else out
        return forward

    children = list(layer.named_children())
    for name, sub in children:
        sub.forward = stand_in(name, sub)
    try:
        with torch.no_grad(), _Recorder(values, keep):
            out = layer(x, attention_mask=None, cache=None, position_embeddings=None)
    except LayerRefused:
        raise
    except Exception as e:  # the layer's own code on stand-ins: whatever it raises
        raise LayerRefused(f"{where}: running its forward with its "
                           f"parts as stand-ins failed ({type(e).__name__}: "
                           f"{str(e).splitlines()[0] if str(e) else ''}); stepc composes "
                           "a layer that calls norms, an attention and an MLP on its hidden "
                           "states") from None
    finally:
        for _, sub in children:
            del sub.forward
    out = out[0] if isinstance(out, tuple) and out else out
    if not isinstance(out, torch.Tensor) or id(out) not in values:
        raise LayerRefused(f"{where}: its forward returns "
                           f"{type(out).__name__}, not a tensor computed from its parts")
    return values[id(out)]


def _blocks(value: _Value, cls: str) -> list[list[str]]:
    """The residual blocks (the parts each runs) from the output's value back to the input,
    in the order the forward runs them."""
    blocks = []
    while value.kind != "input":
        if value.kind != "add":
            what = (f"`{value.part}` applied to the stream outside a residual add"
                    if value.kind == "call" else f"`{value.part}` on the hidden states")
            raise LayerRefused(f"{cls}: its forward computes {what}; stepc "
                               "composes residual blocks (stream + norms and one part)")
        chain = None
        for stream, branch in (value.args, value.args[::-1]):
            chain = _chain(branch, stream)
            if chain is not None:
                break
        if chain is None:
            ops = [v.part for v in (_source(a) for a in value.args) if v.kind == "op"]
            what = (f"computes `{ops[0]}` on the stream between its parts" if ops else
                    "adds a branch that does not read the stream it is added to (a "
                    "parallel attention and MLP)")
            raise LayerRefused(f"{cls}: its forward {what}; stepc composes sequential "
                               "residual blocks (stream + norms and one part)")
        blocks.append(chain)
        value = stream
    return blocks[::-1]


def _chain(branch: _Value, stream: _Value) -> list[str] | None:
    """The parts `branch` applies to `stream`, first to last, or None if it does not."""
    parts = []
    while branch is not stream:
        if branch.kind != "call":
            return None
        parts.append(branch.part)
        branch = branch.args[0]
    return parts[::-1] or None



def _source(value: _Value) -> _Value:
    """The value a chain of parts starts from."""
    while value.kind == "call":
        value = value.args[0]
    return value
