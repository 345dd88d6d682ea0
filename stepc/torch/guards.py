"""What `from_torch` refuses before lowering, as usage errors (`InputRefused`, exit 2 on the
command line): a module that contains itself (or nests too deep for torch to walk), example
inputs its forward does not take, and zero-size tensors (a parameter, an input, or a
captured operator's result), which no STeP program can declare."""

from __future__ import annotations

import inspect

import torch

from stepc.torch.capture import InputRefused, Node, forward_tensors

MAX_DEPTH = 100  # submodules nested deeper than this: torch recurses once per level


def refuse_nesting(module: torch.nn.Module) -> None:
    """Refuse a module that is its own submodule, or its ancestor's (`self.me = self`), on
    which torch itself recurses forever (`eval()`, `state_dict()`), and submodules nested
    deeper than Python's recursion allows torch to walk."""
    stack = [("", module, (id(module),))]
    while stack:
        path, mod, ancestors = stack.pop()
        for name, child in mod._modules.items():
            if child is None:
                continue
            where = f"{path}.{name}" if path else name
            if id(child) in ancestors:
                what = "the module itself" if child is module else "one of its ancestors"
                raise InputRefused(f"submodule `{where}` of {type(module).__name__} is {what} "
                                   f"({type(child).__name__}): a module that contains itself "
                                   "cannot be called or lowered")
            if len(ancestors) > MAX_DEPTH:
                raise InputRefused(f"submodule `{where[:80]}...` of {type(module).__name__} is "
                                   f"nested more than {MAX_DEPTH} modules deep (stepc lowers "
                                   "modules torch can walk without deep recursion)")
            stack.append((where, child, ancestors + (id(child),)))


def refuse_arguments(module: torch.nn.Module, example_inputs: tuple) -> None:
    """Refuse example inputs the module's forward cannot take (too many, or a required
    argument missing), naming the forward's signature."""
    try:
        sig = inspect.signature(module.forward)
    except (TypeError, ValueError):  # a builtin forward: torch reports it when called
        return
    try:
        sig.bind(*example_inputs)
    except TypeError as e:
        n = len(example_inputs)
        raise InputRefused(f"`{type(module).__name__}.forward{sig}` cannot take the {n} "
                           f"example input{'s' if n != 1 else ''} given ({e}); give one "
                           "input per forward argument, in order") from None


def refuse_empty(module: torch.nn.Module, example_inputs: tuple) -> None:
    """Refuse a parameter, buffer or example input with a zero-size dim."""
    for kind, named in (("parameter", module.named_parameters()),
                        ("buffer", module.named_buffers())):
        for key, t in named:
            if 0 in t.shape:
                raise InputRefused(f"{kind} `{key}` is {list(t.shape)}: a zero-size dim (a "
                                   "STeP tensor's dims are positive)")
    for i, t in enumerate(forward_tensors(example_inputs, caches=False)):
        if 0 in t.shape:
            raise InputRefused(f"example input {i} is {list(t.shape)}: a zero-size dim (a "
                               "STeP tensor's dims are positive)")


def refuse_empty_nodes(nodes: list[Node]) -> None:
    """Refuse a captured operator whose result has a zero-size dim."""
    for n in nodes:
        if 0 in n.shape:
            what = {"param": f"parameter `{n.target}`", "input": f"input `{n.name}`"}.get(
                n.op, f"aten.{n.op} in {n.site}")
            raise InputRefused(f"{what} is {list(n.shape)}: a zero-size dim (a STeP tensor's "
                               "dims are positive)")
