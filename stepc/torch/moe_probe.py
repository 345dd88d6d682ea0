"""Running a sparse MoE block to see what it does with its router and its experts, for
the blocks recognised by structure (stepc/torch/moe_structure.py).

`probe` runs the block's forward, marking each tensor with the children of the block
whose outputs it was computed from, and records every top-k and the first call of an
expert: so the router is found as the child whose output feeds the top-k or the routing
the experts receive, whatever its name. On the meta device (lowering from the command
line) the run ends at the first data-dependent operator, after the router.

`measured_weights` finds the routing weights of a block whose experts are a list of
modules, as its own combine applies them: each expert's output replaced by a unit row
(expert e's in column e), the block's output holds, in column e of token b, the weight
by which it scales expert e's output for b.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

_SKIPPED = (os.path.dirname(torch.__file__), os.path.dirname(__file__))


class _ExpertCalled(Exception):
    """Ends a probe at the first call of an expert."""


@dataclass
class TopK:
    """One top-k the forward computed: its ids and the children its input comes from."""

    ids: torch.Tensor
    sources: frozenset[str]


@dataclass
class Probe:
    """What a forward did before its first expert call (or before it stopped)."""

    topks: list[TopK] = field(default_factory=list)
    call: tuple = ()                 # the first expert call's tensor arguments, in order
    call_sources: tuple = ()         # the children each of them comes from
    read: set[int] = field(default_factory=set)  # ids of the tensors read before that call
    output: torch.Tensor | None = None  # the block's output, when it ran to its end
    error: Exception | None = None   # what ended the run early, if not an expert call


class _Lineage(TorchFunctionMode):
    """Marks each tensor an operator returns with the children its arguments come from,
    and records the top-k calls."""

    def __init__(self, probe: Probe):
        super().__init__()
        self.probe = probe
        self.marks: dict[int, tuple[torch.Tensor, frozenset[str]]] = {}
        self.expert_called = False

    def sources(self, *objs) -> frozenset[str]:
        found: frozenset[str] = frozenset()
        for t in tree_leaves(objs):
            if isinstance(t, torch.Tensor) and id(t) in self.marks:
                found |= self.marks[id(t)][1]
        return found

    def mark(self, obj, names: frozenset[str]) -> None:
        for t in tree_leaves(obj):
            if isinstance(t, torch.Tensor):
                self.marks[id(t)] = (t, names | self.sources(t))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.expert_called:
            self.probe.read.update(id(t) for t in tree_leaves((args, kwargs))
                                   if isinstance(t, torch.Tensor))
        out = func(*args, **kwargs)
        names = self.sources(args, kwargs)
        if names:
            self.mark(out, names)
        if getattr(func, "__name__", "") == "topk" and not self.expert_called:
            self.probe.topks.append(TopK(out[1], names))
        return out


def probe(module: torch.nn.Module, inputs: tuple, experts: list[torch.nn.Module],
          stop: bool = True, replace=None) -> Probe:
    """Run `module` on `inputs` recording its top-k calls and the first call of one of
    `experts`; with `stop`, the run ends there. `replace(index, output)`, if given,
    replaces the output of `experts[index]`."""
    result = Probe()
    lineage = _Lineage(result)
    expert_ids = {id(e) for e in experts}
    hooks = [child.register_forward_hook(
        lambda _m, _i, out, name=name: lineage.mark(out, frozenset({name})))
        for name, child in module.named_children() if id(child) not in expert_ids]

    def called(_m, args, kwargs):
        if not lineage.expert_called:
            lineage.expert_called = True
            call = tuple(t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor))
            result.call = call
            result.call_sources = tuple(lineage.sources(t) for t in call)
        if stop:
            raise _ExpertCalled
    hooks += [e.register_forward_pre_hook(called, with_kwargs=True) for e in experts]
    if replace is not None:
        hooks += [e.register_forward_hook(lambda _m, _i, out, i=i: replace(i, out))
                  for i, e in enumerate(experts)]
    try:
        with torch.no_grad(), lineage:
            result.output = module(*inputs)
    except _ExpertCalled:
        pass
    except Exception as e:  # the run stops at a data-dependent op on the meta device
        result.error = e
    finally:
        for h in hooks:
            h.remove()
    return result


def measured_weights(module: torch.nn.Module, inputs: tuple, experts: list[torch.nn.Module],
                     hidden: int) -> tuple[torch.Tensor, list[TopK], str]:
    """The coefficients `[T, E]` by which the block's output combines its experts'
    outputs, the top-k calls before its first expert call, and what went wrong ("" when
    nothing did): an error of the forward, an expert output that is not `[n, hidden]`, or
    a part of the output that comes from no expert."""
    n_experts = len(experts)
    columns, topks = [], []
    for start in range(0, n_experts, hidden):
        bad: list[str] = []

        def unit_rows(index: int, out, start=start, bad=bad):
            if not isinstance(out, torch.Tensor) or out.shape[-1] != hidden:
                bad.append(f"expert {index} returned "
                           f"{list(out.shape) if isinstance(out, torch.Tensor) else out!r}, "
                           f"not [tokens, {hidden}]")
                return out
            unit = torch.zeros_like(out)
            if 0 <= index - start < hidden:
                unit[..., index - start] = 1
            return unit

        run = probe(module, inputs, experts, stop=False, replace=unit_rows)
        if run.error is not None:
            return torch.empty(0), [], failure(run.error)
        if bad:
            return torch.empty(0), [], bad[0]
        if not isinstance(run.output, torch.Tensor) or run.output.shape[-1] != hidden:
            return torch.empty(0), [], "the block's output is not [..., hidden]"
        rows = run.output.reshape(-1, hidden).float()
        width = min(hidden, n_experts - start)
        if bool(rows[:, width:].any()):
            return torch.empty(0), [], ("its output holds more than the weighted sum of its "
                                        "experts' outputs (a term no expert computes)")
        columns.append(rows[:, :width])
        topks = run.topks
    return torch.cat(columns, dim=1), topks, ""


def failure(error: Exception) -> str:
    """`Type: message at file:line` of an error the block's forward raised (its innermost
    frame outside torch and stepc)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if not f.filename.startswith(_SKIPPED)]
    at = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}{at}"
