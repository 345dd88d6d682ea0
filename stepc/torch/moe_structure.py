"""Sparse MoE blocks recognised by what they are, not by their class name: a child holding
experts in a known layout (fused `gate_up_proj` / `down_proj`, DBRX's stacked `mlp.w1` /
`v1` / `w2`), or a `ModuleList` of modules of one class (or a child named `experts`) that
the forward calls after a top-k, or with top-k ids and routing weights. `find` hands such
a block to the `moe-by-structure` family (stepc/torch/families.py), lowered by
stepc/torch/moe_parts.py, which refuses, saying what differs, the blocks whose experts
are not what it lowers.
"""

from __future__ import annotations

import torch

from stepc.torch import families
from stepc.torch.capture import quiet
from stepc.torch.moe_probe import probe

STACKED = ("w1", "v1", "w2")  # DBRX's stacked weights, in the order its experts pass them


def find(module: torch.nn.Module, example_inputs: tuple) -> families.Family | None:
    """The structural MoE family when `module` is a sparse MoE block by its parts: fused or
    stacked experts, or a `ModuleList` (or a child named `experts`) that its forward calls
    after a top-k or with routing arguments (for `experts`, any integer tensor)."""
    found = find_experts(module)
    if found is None:
        return None
    path, form = found
    if form not in ("fused", "stacked"):
        experts = getattr(module, path)
        with quiet(False):
            run = probe(module, example_inputs,
                        list(experts) if form == "list" else [experts])
        routed = routing_index(run.call) is not None or (
            form == "" and any(not t.is_floating_point() for t in run.call))
        if not routed and not any(t.sources for t in run.topks):
            return None
    return families.STRUCTURAL_MOE


def find_experts(block: torch.nn.Module) -> tuple[str, str] | None:
    """(attribute, form) of the block's experts, by layout; a child named `experts` of no
    known layout is returned with the form "" (it is refused with what it is)."""
    found = sorted((not form, name != "experts", name, form)
                   for name, form in ((n, _form(sub)) for n, sub in block.named_children())
                   if form or name == "experts")
    return found[0][2:] if found else None


def _form(sub: torch.nn.Module) -> str:
    if all(isinstance(getattr(sub, n, None), torch.Tensor) and getattr(sub, n).dim() == 3
           for n in ("gate_up_proj", "down_proj")):
        return "fused"
    mlp = getattr(sub, "mlp", None)
    if all(isinstance(getattr(mlp, n, None), torch.Tensor) and getattr(mlp, n).dim() == 2
           for n in STACKED):
        return "stacked"
    if isinstance(sub, torch.nn.ModuleList) and len(sub) >= 2 \
            and len({type(m) for m in sub}) == 1 and any(True for _ in sub[0].parameters()):
        return "list"
    return ""


def routing_index(call: tuple) -> tuple[int, int] | None:
    """The positions of the top-k ids [T, K] and routing weights [T, K] among an expert
    call's arguments, when there is one of each."""
    ids = [i for i, t in enumerate(call) if not t.is_floating_point() and t.dim() == 2]
    weights = [i for i, t in enumerate(call) if ids and t.is_floating_point()
               and t.shape == call[ids[0]].shape]
    return (ids[0], weights[0]) if len(ids) == 1 and len(weights) == 1 else None
