"""The sparse MoE blocks of Hugging Face transformers, lowered whole from their submodules
and weights (the families registered in stepc/torch/families.py).

Their forward routes tokens with data-dependent indexing (a loop over the hit experts with
`torch.where`, or `batched_mm` / `grouped_mm` over gathered weights), which `torch.export`
cannot capture. Every one of them is built from the same parts, read here by name:

- `gate`, the router: `gate(x) -> (logits, weights [T, K], ids [T, K])`. It runs ahead of
  the program, as in the paper's MoE programs: its ids are the `routing` trace and its
  weights the input RW. Whatever its scoring (softmax or sigmoid, `norm_topk_prob`,
  DeepSeek's group-limited top-k with its correction bias, `routed_scaling_factor`), the
  module's own router computes them, so the program's math does not depend on it (nor on
  the weights the router holds).
- `experts`: fused `gate_up_proj [E, 2F, D]` (gate rows first) and `down_proj [E, D, F]`
  (`[E, D, 2F]` and `[E, F, D]` when the class is marked `is_transposed`), a SiLU between;
  the program holds them as up / gate `[E, D, F]` and down `[E, F, D]`. Every
  `config._experts_implementation` (the eager loop, `batched_mm`, `grouped_mm`) computes
  the same function of these weights.
- `shared_experts` / `shared_expert` / `shared_mlp`: a SwiGLU MLP every token goes through,
  added to the routed sum, scaled per token by `sigmoid(shared_expert_gate(x))` where the
  block has one.

Batch and sequence of a `[batch, seq, hidden]` input fold into the program's B tokens.
"""

from __future__ import annotations

import inspect
import os
import textwrap

import torch

from stepc.torch import families
from stepc.torch.capture import LoweringError, dtype_name
from stepc.torch.emit import StepWriter
from stepc.torch.moe import ROUTER_AHEAD, ROUTING_WEIGHTS, MoeSpec, MoeTensor, emit_moe
from stepc.torch.moe import SharedExpert as Shared

SHARED_NAMES = ("shared_experts", "shared_expert", "shared_mlp")
_X_SOURCE = "hidden_states, batch and sequence folded"
_EXPERT_SOURCES = {"up": "experts.gate_up_proj, its up rows, as [E, D, F]",
                   "gate": "experts.gate_up_proj, its gate rows, as [E, D, F]",
                   "down": "experts.down_proj, as [E, F, D]"}
SHARED_GATE = "shared_expert_gate"
_SILU = ("SiLUActivation", "SiLU")
# router settings worth naming in the program's header, when the router has them
_ROUTER_SETTINGS = ("norm_topk_prob", "topk_method", "num_group", "topk_group",
                    "routed_scaling_factor")


def lower_hf_moe(module: torch.nn.Module, example_inputs: tuple, tiling: str, sched: dict):
    """The family lowering of a transformers sparse MoE block (see the module docstring)."""
    from stepc.torch.lowering import TorchProgram

    spec, shared_path = hf_moe_spec(module, example_inputs)
    w = StepWriter()
    cls = type(module)
    title = (f"{cls.__name__} ({source(cls)}), lowered by `stepc from-torch` "
             f"({tiling} tiling).")
    w.header += [title, *textwrap.wrap(f"{families.find(module).doc}.", 86), ""]
    tensors = emit_moe(w, spec, tiling, sched)
    return TorchProgram(w.render(), tensors, module, {"tiling": tiling, **sched},
                        routing=HFRouting(module, spec.D, shared_path, tensors))


def hf_moe_spec(module: torch.nn.Module, example_inputs: tuple) -> tuple[MoeSpec, str]:
    """The block's MoeSpec and its shared expert's attribute name ("" without one), after
    checking every part is one the program computes."""
    experts = _part(module, "experts")
    gate = _part(module, "gate")
    e, two_f, d = fused_shape(experts)
    x = block_input(module, example_inputs, d)
    k = getattr(gate, "top_k", None)
    if not isinstance(k, int) or not 0 < k <= e:
        raise LoweringError(f"{where(gate, 'gate')}: expected a router with an integer "
                            f"`top_k` between 1 and its {e} experts, found {k!r}")
    check_experts(experts)
    shared, shared_path = _shared(module, d)
    _check_parameters(module, shared_path)
    settings = ", ".join(f"{s}={getattr(gate, s)}" for s in _ROUTER_SETTINGS
                         if hasattr(gate, s))
    spec = MoeSpec(
        B=x.numel() // d, D=d, F=two_f // 2, E=e, K=k, dtype=dtype_name(x.dtype),
        x=MoeTensor("HIDDEN_STATES", _X_SOURCE,
                    f"forward argument `hidden_states` {list(x.shape)} as [B, D]"),
        experts={r: MoeTensor(f"experts_{r}_proj", src, src)
                 for r, src in _EXPERT_SOURCES.items()},
        about=[f"Router: {where(gate, 'gate')}, top-{k} of {e}"
               + (f" ({settings})" if settings else "") + f"; {ROUTER_AHEAD}",
               (f"Experts: {where(experts, 'experts')}, {_implementation(experts)} "
                "implementation; the fused gate_up_proj split into gate and up.")],
        combine=source(type(module).forward), shared=shared)
    return spec, shared_path


class HFRouting:
    """Runs the block's own router ahead of the program and derives the program's tensors
    from the block's weights (the fused experts split and transposed, inputs folded)."""

    weights_tensor = "RW"

    def __init__(self, module: torch.nn.Module, hidden: int, shared_path: str,
                 tensors: dict[str, str]):
        self.module, self.hidden, self.shared_path = module, hidden, shared_path
        self.tensors = tensors  # program tensor -> source, as lower_hf_moe named them

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The top-k expert ids and routing weights, [B, K] each."""
        rows, gate = self._rows(inputs), self.module.gate
        weights = [p for p in gate.parameters() if p.is_floating_point()]
        if weights and rows.is_floating_point() and rows.dtype != weights[0].dtype:
            rows = rows.to(weights[0].dtype)  # bf16 activations into an f32 module's router
        try:
            with torch.no_grad():
                out = gate(rows)
        except RuntimeError as e:  # e.g. a bf16 input to an f32 router
            raise LoweringError(f"{where(gate, 'gate')}: running the router on "
                                f"{rows.dtype} hidden_states {list(rows.shape)} failed: "
                                f"{str(e).splitlines()[0]}") from None
        want = (rows.shape[0], gate.top_k)
        if not (isinstance(out, tuple) and len(out) == 3
                and all(isinstance(t, torch.Tensor) and tuple(t.shape) == want for t in out[1:])
                and not out[2].is_floating_point()):
            raise LoweringError(f"{where(gate, 'gate')}: expected the router to return "
                                f"(logits, weights {list(want)}, expert ids {list(want)})")
        return out[2], out[1]

    def values(self, *inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every program tensor but the output, for these inputs."""
        _, weights = self(*inputs)
        up, gate, down = expert_weights(self.module.experts)
        by_source = {ROUTING_WEIGHTS: weights, _X_SOURCE: self._rows(inputs),
                     _EXPERT_SOURCES["up"]: up, _EXPERT_SOURCES["gate"]: gate,
                     _EXPERT_SOURCES["down"]: down}
        if self.shared_path:
            mlp = getattr(self.module, self.shared_path)
            for r in ("up", "gate", "down"):
                by_source[_shared_source(self.shared_path, r)] = \
                    getattr(mlp, f"{r}_proj").weight.detach().T
            if hasattr(self.module, SHARED_GATE):
                by_source[_shared_source(SHARED_GATE)] = \
                    getattr(self.module, SHARED_GATE).weight.detach().T
        for src, t in by_source.items():
            if t.is_meta:
                raise LoweringError(f"{src}: the block is on the meta device; take values "
                                    "from a real one with `program.on_module(block)`")
            if not bool(torch.isfinite(t).all()):
                raise LoweringError(f"{src}: holds non-finite values (transformers leaves a "
                                    "bare block's weights uninitialised: initialise them, or "
                                    "build the block inside its model)")
        return {name: by_source[src] for name, src in self.tensors.items() if src in by_source}

    def forward_args(self, inputs: tuple) -> tuple:
        """The forward arguments whose output the program computes: the tokens as one
        sequence `[1, B, D]` (transformers' blocks take `[batch, seq, D]`), in the experts'
        dtype (bf16 tokens into an f32 block, widened as its router takes them)."""
        return (self._rows(inputs)[None].to(self.module.experts.gate_up_proj.dtype),)

    def on_module(self, module: torch.nn.Module) -> HFRouting:
        """The same routing on another module of the same class (e.g. built on the CPU
        after lowering one on the meta device)."""
        return HFRouting(module, self.hidden, self.shared_path, self.tensors)

    def _rows(self, inputs: tuple) -> torch.Tensor:
        if len(inputs) != 1:
            raise LoweringError(f"a MoE block takes one input (hidden_states), given "
                                f"{len(inputs)}")
        return inputs[0].detach().reshape(-1, self.hidden)


def expert_weights(experts: torch.nn.Module
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """up, gate [E, D, F] and down [E, F, D] from the fused expert weights."""
    gate_up, down = experts.gate_up_proj.detach(), experts.down_proj.detach()
    if getattr(experts, "is_transposed", False):  # stored [E, in, out]: to [E, out, in]
        gate_up, down = gate_up.transpose(1, 2), down.transpose(1, 2)
    gate, up = gate_up.chunk(2, dim=1)
    return up.transpose(1, 2), gate.transpose(1, 2), down.transpose(1, 2)


def _part(module: torch.nn.Module, name: str) -> torch.nn.Module:
    sub = getattr(module, name, None)
    if not isinstance(sub, torch.nn.Module):
        raise LoweringError(f"{type(module).__name__} ({source(type(module))}): a sparse MoE "
                            f"block lowers from its submodule `{name}`, which it does not have")
    return sub


def fused_shape(experts: torch.nn.Module, path: str = "experts") -> tuple[int, int, int]:
    """E, 2F, D of the fused expert weights (checked against down_proj)."""
    gate_up, down = (getattr(experts, n, None) for n in ("gate_up_proj", "down_proj"))
    if not isinstance(gate_up, torch.Tensor) or not isinstance(down, torch.Tensor) \
            or gate_up.dim() != 3 or down.dim() != 3:
        raise LoweringError(f"{where(experts, path)}: expected fused expert weights "
                            "gate_up_proj [E, 2F, D] and down_proj [E, D, F]")
    e, two_f, d = gate_up.shape
    want = (e, d, two_f // 2)
    if getattr(experts, "is_transposed", False):
        (e, d, two_f), want = gate_up.shape, (e, gate_up.shape[2] // 2, gate_up.shape[1])
    if two_f % 2 or tuple(down.shape) != want:
        raise LoweringError(f"{where(experts, path)}: gate_up_proj "
                            f"{list(gate_up.shape)} and down_proj {list(down.shape)} are not "
                            "the fused [E, 2F, D] and [E, D, F] of one SwiGLU per expert")
    return e, two_f, d


def check_experts(experts: torch.nn.Module, path: str = "experts") -> None:
    """Refuse the expert variants the SwiGLU program does not compute."""
    at = where(experts, path)
    for flag, ok, what in (("has_gate", True, "gated (gate_up_proj) experts"),
                           ("has_bias", False, "experts without biases"),
                           ("has_post_expert_norm", False, "no norm after each expert"),
                           ("is_concatenated", True, "gate and up rows concatenated")):
        if getattr(experts, flag, ok) != ok:
            raise LoweringError(f"{at}: {flag}={not ok} is not lowered (stepc lowers "
                                f"{what})")
    try:
        from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS, _default_apply_gate
    except ImportError:  # not a transformers class: no gate or implementation variants
        ALL_EXPERTS_FUNCTIONS, _default_apply_gate = {}, None
    apply_gate = getattr(type(experts), "_apply_gate", _default_apply_gate)
    if apply_gate is not _default_apply_gate:
        raise LoweringError(f"{at}: a custom `_apply_gate` is not lowered (stepc lowers "
                            "silu(gate) * up)")
    _check_silu(getattr(experts, "act_fn", None), experts, path)
    impl = _implementation(experts)
    if impl != "eager" and impl not in ALL_EXPERTS_FUNCTIONS:
        raise LoweringError(f"{at}: unknown config._experts_implementation `{impl}` (eager, "
                            f"{', '.join(ALL_EXPERTS_FUNCTIONS)})")


def _check_silu(act, owner: torch.nn.Module, path: str) -> None:
    if type(act).__name__ not in _SILU and act is not torch.nn.functional.silu:
        name = getattr(act, "__name__", type(act).__name__)
        raise LoweringError(f"{where(owner, path)}: activation {name} is not lowered (stepc "
                            "lowers SwiGLU experts: hidden_act \"silu\")")


def _implementation(experts: torch.nn.Module) -> str:
    config = getattr(experts, "config", None)
    return getattr(config, "_experts_implementation", None) or "eager"


def _shared(module: torch.nn.Module, d: int) -> tuple[Shared | None, str]:
    """The block's shared expert (and its sigmoid gate), with its attribute name."""
    path = next((n for n in SHARED_NAMES if isinstance(getattr(module, n, None),
                                                        torch.nn.Module)), "")
    if not path:
        return None, ""
    mlp = getattr(module, path)
    layers = {r: getattr(mlp, f"{r}_proj", None) for r in ("up", "gate", "down")}
    if not all(isinstance(m, torch.nn.Linear) and m.bias is None for m in layers.values()):
        raise LoweringError(f"{where(mlp, path)}: expected a SwiGLU MLP of gate_proj, up_proj "
                            "and down_proj linear layers without bias")
    fs = layers["up"].out_features
    if (layers["gate"].out_features, layers["down"].in_features, layers["up"].in_features,
            layers["down"].out_features) != (fs, fs, d, d):
        raise LoweringError(f"{where(mlp, path)}: gate/up/down projections of shapes "
                            f"{[list(m.weight.shape) for m in layers.values()]} do not form a "
                            f"SwiGLU from {d} to {d}")
    _check_silu(getattr(mlp, "act_fn", None), mlp, path)
    weights = {r: MoeTensor(f"{path}_{r}_proj", _shared_source(path, r),
                            _shared_source(path, r)) for r in ("up", "gate", "down")}
    gate = getattr(module, SHARED_GATE, None)
    gate_t = None
    if gate is not None:
        if not (isinstance(gate, torch.nn.Linear) and gate.bias is None
                and tuple(gate.weight.shape) == (1, d)):
            raise LoweringError(f"{where(gate, SHARED_GATE)}: expected a linear layer from "
                                f"{d} to 1 without bias (the shared expert's sigmoid gate)")
        gate_t = MoeTensor(SHARED_GATE, _shared_source(SHARED_GATE),
                           _shared_source(SHARED_GATE))
    about = (f"Shared expert: {where(mlp, path)}, FS = {fs}: every token, on operators of "
             "its own, tiled like the routed experts' tokens; its rows "
             + (f"scaled by sigmoid({SHARED_GATE}(x)) and " if gate_t else "")
             + "added to the routed sum.")
    return Shared(fs, weights, gate_t, about), path


def _shared_source(path: str, role: str = "") -> str:
    layer = f"{path}.{role}_proj" if role else path
    return f"{layer}.weight, transposed"


def _check_parameters(module: torch.nn.Module, shared_path: str) -> None:
    """Refuse a block holding weights this lowering would ignore (the router's are its
    own: it runs ahead of the program, whatever it holds)."""
    known = {"experts.gate_up_proj", "experts.down_proj"}
    if shared_path:
        known |= {f"{shared_path}.{r}_proj.weight" for r in ("up", "gate", "down")}
        known.add(f"{SHARED_GATE}.weight")
    extra = sorted(k for k in set(module.state_dict()) - known if not k.startswith("gate."))
    if extra:
        raise LoweringError(f"{type(module).__name__} ({source(type(module))}): weights "
                            f"{', '.join(extra)} are not part of a routed SwiGLU MoE block "
                            "(router, experts, shared expert); nothing was lowered")


def block_input(module: torch.nn.Module, example_inputs: tuple, d: int) -> torch.Tensor:
    name = type(module).__name__
    if len(example_inputs) != 1 or not isinstance(example_inputs[0], torch.Tensor):
        raise LoweringError(f"{name}.forward takes one input, hidden_states [batch, seq, {d}] "
                            f"or [tokens, {d}]; given {len(example_inputs)}")
    x = example_inputs[0]
    if x.dim() not in (2, 3) or x.shape[-1] != d or x.numel() == 0:
        raise LoweringError(f"{name}.forward: hidden_states {list(x.shape)}: expected "
                            f"[batch, seq, {d}] or [tokens, {d}] with at least one token")
    if not x.is_floating_point():
        raise LoweringError(f"{name}.forward: hidden_states is {x.dtype}, expected a float "
                            "tensor")
    return x


def where(sub: torch.nn.Module, path: str) -> str:
    return f"module `{path}` ({type(sub).__name__}, {source(type(sub))})"


def source(obj) -> str:
    """`file.py:line` of a class or function definition."""
    try:
        return f"{os.path.basename(inspect.getsourcefile(obj))}:{inspect.getsourcelines(obj)[1]}"
    except (TypeError, OSError):
        return obj.__module__
