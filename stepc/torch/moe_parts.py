"""The lowering of a sparse MoE block recognised by its parts (stepc/torch/moe_structure.py),
whatever the block, its router and its experts are called (GraniteMoeMoE's `router`,
DBRX's `router.layer`, a hand-written block's `nn.Linear` and `ModuleList` of SwiGLU
MLPs), into the routed MoE program of stepc/torch/moe.py.

Its experts are read in their layout (stepc/torch/moe_experts.py). Its router is the
child whose output feeds the routing the experts receive (fused and stacked experts are
called once with the tokens, top-k ids and routing weights) or the top-k (a list of
experts). As for the registered families, the router runs ahead of the program:
`traces` / `values` run the block itself up to its experts, or, for a list of experts,
measure the weights its combine applies (stepc/torch/moe_probe.py). A block with experts
that this does not lower is refused with what differs, as a usage error.
"""

from __future__ import annotations

import contextlib
import inspect
import textwrap

import torch

from stepc.torch import families
from stepc.torch.capture import InputRefused, LoweringError, dtype_name, quiet
from stepc.torch.emit import StepWriter
from stepc.torch.hf_moe import SHARED_GATE, SHARED_NAMES, block_input, source, where
from stepc.torch.moe import ROUTER_AHEAD, ROUTING_WEIGHTS, MoeSpec, MoeTensor, emit_moe
from stepc.torch.moe_experts import (
    SWIGLU,
    ExpertLayout,
    ExpertsDiffer,
    SharedLayout,
    expert_layout,
    shared_layout,
)
from stepc.torch.moe_probe import failure, measured_weights, probe
from stepc.torch.moe_structure import find_experts, routing_index

FORMS = ("fused `gate_up_proj [E, 2F, D]` + `down_proj [E, D, F]` (or `is_transposed`), "
         "DBRX's `mlp.w1` / `v1` / `w2` stacked `[E*F, D]`, or a ModuleList of MLPs; "
         f"each expert {SWIGLU}")
_X_SOURCE = "the block's input, leading dims folded"


class BlockRefused(InputRefused):
    """A sparse MoE block stepc does not lower as given (its experts, its weights, or the
    example inputs its forward fails on): a usage error, exit 2 on the command line."""


def lower_structural_moe(module: torch.nn.Module, example_inputs: tuple, tiling: str,
                         sched: dict):
    """The lowering of a block recognised by `find` (see the module docstring)."""
    from stepc.torch.lowering import TorchProgram

    cls = type(module)
    d = _hidden(module, example_inputs)
    x = block_input(module, example_inputs, d)
    path, form = find_experts(module)
    try:
        layout = expert_layout(module, path, form, d)
        shared = shared_layout(module, d)
    except ExpertsDiffer as e:
        raise _refused(module, str(e)) from None
    k, router, read, about = _router(module, example_inputs, layout)
    _check_parameters(module, layout, router, read, shared)
    spec = MoeSpec(
        B=x.numel() // d, D=d, F=layout.F, E=layout.E, K=k, dtype=dtype_name(x.dtype),
        x=MoeTensor("HIDDEN_STATES", _X_SOURCE,
                    f"forward argument `{_argument(module)}` {list(x.shape)} as [B, D]"),
        experts={r: MoeTensor(f"{path}_{r}", src, src) for r, src in layout.sources().items()},
        about=[about, layout.about], combine=source(cls.forward),
        shared=shared.spec() if shared else None)
    w = StepWriter()
    w.header += [f"{cls.__name__} ({source(cls)}), lowered by `stepc from-torch` ({tiling} "
                 "tiling).", *textwrap.wrap(f"{families.STRUCTURAL_MOE.doc}.", 86), ""]
    tensors = emit_moe(w, spec, tiling, sched)
    return TorchProgram(w.render(), tensors, module, {"tiling": tiling, **sched},
                        routing=StructuralRouting(module, layout, k, tensors, shared))


def _refused(module: torch.nn.Module, what: str) -> BlockRefused:
    cls = type(module)
    named = ", ".join(f.name for f in families.FAMILIES if f.kind == "moe" and f.classes)
    return BlockRefused(f"{cls.__name__} ({source(cls)}) is a sparse MoE block that stepc "
                        f"does not lower as it is: {what}. stepc lowers the MoE families "
                        f"registered by class ({named}) and, by structure, a router with "
                        f"experts as {FORMS}")


def _hidden(module: torch.nn.Module, example_inputs: tuple) -> int:
    x = example_inputs[0] if len(example_inputs) == 1 else None
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        given = ", ".join(type(a).__name__ for a in example_inputs) or "nothing"
        raise BlockRefused(f"{type(module).__name__}.forward takes one input, its tokens "
                           f"[..., hidden]; given {given}")
    return x.shape[-1]


def _argument(module: torch.nn.Module) -> str:
    return next(iter(inspect.signature(module.forward).parameters), "x")


def _router(module: torch.nn.Module, example_inputs: tuple, layout: ExpertLayout
            ) -> tuple[int, frozenset[str], set[int], str]:
    """K, the children the routing comes from, the ids of the tensors read before the
    first expert call, and the header's sentence on the router, from a run of the block up
    to that call."""
    with quiet(False):
        run = probe(module, example_inputs, layout.modules(module))
    if layout.form == "list":
        routed = [t for t in run.topks if t.sources]
        if not routed:
            raise _refused(module, f"no top-k fed by a child module is computed before "
                                   f"`{layout.path}[e]` is called{_stopped(run.error)}")
        ids, router, feeds = routed[-1].ids, routed[-1].sources, "the top-k"
    else:
        if run.error is not None:
            shapes = ", ".join(str(list(t.shape)) for t in example_inputs)
            raise BlockRefused(f"calling {type(module).__name__} ({source(type(module))}) on "
                               f"example inputs {shapes} failed before it called its experts: "
                               f"{failure(run.error)}")
        if not run.call:
            raise _refused(module, f"its forward did not call `{layout.path}`")
        ids, _, router = _routing_args(module, run.call, run.call_sources, layout)
        feeds = f"the routing `{layout.path}` receives"
    k = ids.shape[-1] if ids.dim() else 0
    if not 0 < k <= layout.E:
        raise _refused(module, f"its experts receive {k} expert ids per token; expected "
                               f"between 1 and its {layout.E} experts")
    names = " and ".join(where(getattr(module, n), n) for n in sorted(router)) or \
        "the block's own forward"
    return k, router, run.read, (f"Router: {names}, found as what feeds {feeds}; top-{k} "
                                 f"of {layout.E}; {ROUTER_AHEAD}")


def _stopped(error: Exception | None) -> str:
    return f" (the forward stopped: {failure(error)})" if error else ""


def _routing_args(module: torch.nn.Module, call: tuple, sources: tuple,
                  layout: ExpertLayout) -> tuple[torch.Tensor, torch.Tensor, frozenset[str]]:
    """The top-k ids and routing weights among an expert call's arguments, and the
    children they come from."""
    found = routing_index(call)
    if found is None:
        shapes = ", ".join(f"{dtype_name(t.dtype)}{list(t.shape)}" for t in call)
        raise _refused(module, f"`{layout.path}` is called with ({shapes}); expected the "
                               "tokens, top-k ids [T, K] and routing weights [T, K]")
    ids, weights = found
    return call[ids], call[weights], sources[ids] | sources[weights]


def _check_parameters(module: torch.nn.Module, layout: ExpertLayout, router: frozenset[str],
                      read: set[int], shared: SharedLayout | None) -> None:
    """Refuse weights the program would ignore: all are the experts', the shared
    expert's, the router's, or the block's own tensors read before it calls the experts (a
    router's bias the block holds, as MiniMax-M2's `e_score_correction_bias`)."""
    known = layout.parameters() | (shared.parameters() if shared else set())
    extra = sorted(k for k, t in module.state_dict(keep_vars=True).items()
                   if k not in known and k.split(".")[0] not in router
                   and ("." in k or id(t) not in read))
    if extra:
        raise _refused(module, f"its weights {', '.join(extra)} are neither its router's, its "
                               "experts' nor a shared SwiGLU expert's (one of "
                               f"{', '.join(SHARED_NAMES)}, with an optional "
                               f"{SHARED_GATE})")


class StructuralRouting:
    """The expert ids and routing weights of a block recognised by structure, by running
    the block (see the module docstring), and the program's tensors from its weights."""

    weights_tensor = "RW"

    def __init__(self, module: torch.nn.Module, layout: ExpertLayout, k: int,
                 tensors: dict[str, str], shared: SharedLayout | None = None):
        self.module, self.layout, self.k = module, layout, k
        self.tensors = tensors  # program tensor -> source, as lower_structural_moe named them
        self.shared = shared

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The top-k expert ids and routing weights, [B, K] each."""
        rows = self._rows(inputs)
        x = inputs[0].detach()
        param = next(self.module.parameters())
        if param.is_meta or x.is_meta:
            raise LoweringError("the block or its input is on the meta device; run its router "
                                "on a real one with `program.on_module(block)`")
        if x.dtype != param.dtype:
            x = x.to(param.dtype)  # bf16 tokens into an f32 block: its router widens them
        experts = self.layout.modules(self.module)
        if self.layout.form == "list":
            with self._shared_silenced():  # its term is the shared expert's, not a combine
                coef, topks, problem = measured_weights(self.module, (x,), experts,
                                                        rows.shape[1])
            routed = [t for t in topks if t.sources]
            if problem or not routed:
                raise self._failed(problem or "no top-k fed by its router was computed")
            ids = self._checked(routed[-1].ids, rows.shape[0])
            weights = coef.gather(1, ids)
            if bool(coef.scatter(1, ids, 0.0).any()):
                raise self._failed("its output combines experts outside each token's top-k")
            return ids, weights.to(rows.dtype)
        run = probe(self.module, (x,), experts)
        if not run.call:
            raise self._failed(f"`{self.layout.path}` was not called{_stopped(run.error)}")
        ids, weights, _ = _routing_args(self.module, run.call, run.call_sources, self.layout)
        tokens = run.call[0]
        if tokens.numel() != rows.numel() or not torch.equal(tokens.reshape(rows.shape),
                                                             x.reshape(rows.shape)):
            raise self._failed(f"`{self.layout.path}` receives other tokens than the block's "
                               "input (the program's experts read the input)")
        return self._checked(ids, rows.shape[0]), weights.reshape(-1, self.k)

    @contextlib.contextmanager
    def _shared_silenced(self):
        """The block with its shared expert's output replaced by zeros."""
        if self.shared is None:
            yield
            return
        mlp = getattr(self.module, self.shared.path)
        hook = mlp.register_forward_hook(lambda _m, _i, out: torch.zeros_like(out))
        try:
            yield
        finally:
            hook.remove()

    def values(self, *inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every program tensor but the output, for these inputs."""
        _, weights = self(*inputs)
        sources = self.layout.sources()
        by_source = {ROUTING_WEIGHTS: weights, _X_SOURCE: self._rows(inputs),
                     **{sources[r]: t for r, t in self.layout.weights(self.module).items()},
                     **(self.shared.weights(self.module) if self.shared else {})}
        for src, t in by_source.items():
            if not bool(torch.isfinite(t).all()):
                raise LoweringError(f"{src}: holds non-finite values")
        return {name: by_source[src] for name, src in self.tensors.items() if src in by_source}

    def on_module(self, module: torch.nn.Module) -> StructuralRouting:
        """The same routing on another module of the same class."""
        return StructuralRouting(module, self.layout, self.k, self.tensors, self.shared)

    @staticmethod
    def forward_args(inputs: tuple) -> tuple:
        """The forward arguments whose output the program computes: these (read when the
        program is verified against the block)."""
        return inputs

    def _rows(self, inputs: tuple) -> torch.Tensor:
        if len(inputs) != 1:
            raise LoweringError(f"a MoE block takes one input (its tokens), given "
                                f"{len(inputs)}")
        x = inputs[0]
        if not isinstance(x, torch.Tensor) or x.dim() < 2 or x.shape[-1] != self.layout.D:
            raise LoweringError(f"a MoE block's input is [..., {self.layout.D}] tokens, given "
                                f"{list(x.shape) if isinstance(x, torch.Tensor) else x!r}")
        return x.detach().reshape(-1, self.layout.D)

    def _checked(self, ids: torch.Tensor, tokens: int) -> torch.Tensor:
        """The top-k ids as [tokens, K], refused unless each token has K experts' ids."""
        if ids.shape[-1] != self.k or ids.numel() != tokens * self.k \
                or bool((ids < 0).any() or (ids >= self.layout.E).any()):
            raise self._failed(f"its top-k ids ({list(ids.shape)}) are not [{tokens}, "
                               f"{self.k}] ids of its {self.layout.E} experts")
        return ids.reshape(-1, self.k)

    def _failed(self, what: str) -> LoweringError:
        return LoweringError(f"{type(self.module).__name__} ({source(type(self.module))}): "
                             f"running the block for its routing: {what}")
