"""`from_torch`: a module lowered to a `TorchProgram` (a block family recognised by class, or
the captured graph canonicalised and lowered node by node)."""

from __future__ import annotations

import inspect
import os
import warnings
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from stepc.torch import families, guards, moe_structure
from stepc.torch import hf_decoder_structure as decoder_structure
from stepc.torch import verify as verify_mod
from stepc.torch.attention import ATTENTION_TILINGS, AttentionLayout, is_attention, lower_attention
from stepc.torch.build import BuildError, load_target
from stepc.torch.canon import canonicalise
from stepc.torch.capture import InputRefused, LoweringError, capture, quiet
from stepc.torch.dense import lower_dense
from stepc.torch.emit import StepWriter
from stepc.torch.moe import MOE_TILINGS, RoutingProbe, lower_moe


@dataclass
class TorchProgram:
    """An emitted program and how its tensors relate to the module."""

    text: str
    tensors: dict[str, str]  # program tensor -> state-dict key, forward argument, or role
    module: torch.nn.Module = field(repr=False)
    schedule: dict = field(default_factory=dict)
    routing: RoutingProbe | None = field(default=None, repr=False)
    layout: AttentionLayout | None = field(default=None, repr=False)
    arg_roles: dict[str, str] = field(default_factory=dict)  # decode attention: role -> argument
    io: object | None = field(default=None, repr=False)  # a family's values/traces/seeded_inputs
    example: tuple = field(default=(), repr=False)  # the example inputs it was lowered for
    verification: verify_mod.Verification | None = None  # what its header says was verified

    def values(self, *inputs: torch.Tensor) -> dict[str, np.ndarray]:
        """The program's tensor values (float32) for these forward arguments: the module's
        weights, the inputs, and for a MoE block the routing weights its router computes."""
        if self.io is not None:
            return self.io.values(self.module, inputs)
        state = self.module.state_dict()
        args = dict(zip(self.arg_names(), inputs))
        if self.layout is not None:
            return self.layout.values(args, self.arg_roles)
        out = {}
        for name, src in self.tensors.items():
            if src in state:
                out[name] = _np(state[src])
            elif src in args:
                arr = _np(args[src])  # leading dims fold into the program's rows
                out[name] = arr.reshape(-1, arr.shape[-1]) if arr.ndim > 2 else arr
        if self.routing is not None:
            out.update({k: _np(v) for k, v in self.routing.values(*inputs).items()})
        return out

    def traces(self, *inputs: torch.Tensor) -> dict[str, np.ndarray]:
        """External streams for these inputs (a MoE block's `routing`: top-k expert ids;
        decode attention's `kv_lens`)."""
        if self.io is not None:
            return self.io.traces(self.module, inputs)
        if self.layout is not None:
            args = dict(zip(self.arg_names(), inputs))
            return {"kv_lens": args[self.arg_roles["kv_lens"]].numpy().astype(np.int64)}
        if self.routing is None:
            return {}
        ids, _ = self.routing(*inputs)
        return {"routing": ids.numpy().astype(np.int64)}

    def save_weights(self, path: str, *inputs: torch.Tensor) -> None:
        """Write `values(*inputs)` as a safetensors file for `stepc sim --weights`."""
        from safetensors.numpy import save_file
        save_file({k: np.ascontiguousarray(v) for k, v in self.values(*inputs).items()}, path)

    def seeded_inputs(self, example: tuple, seed: int = 0) -> tuple:
        """Real (CPU) forward arguments shaped like `example`: seeded normal floats; decode
        attention's KV lengths seeded multiples of TILE_N less one, below MAXN (for which its
        program's math is exact)."""
        if self.io is not None:
            return self.io.seeded_inputs(self.module, example, seed)
        g = torch.Generator().manual_seed(seed)
        out = []
        for name, t in zip(self.arg_names(), example):
            if t.is_floating_point():
                out.append(torch.randn(t.shape, generator=g).to(t.dtype))
            elif self.layout is not None and name == self.arg_roles.get("kv_lens"):
                out.append(self.layout.seeded_lens(t.shape[0], g).to(t.dtype))
            else:
                raise LoweringError(f"forward argument `{name}`: no seeded example values for "
                                    f"a {t.dtype} input of this block")
        return tuple(out)

    def on_module(self, module: torch.nn.Module) -> TorchProgram:
        """This program with its values taken from `module` (the same class, e.g. built on
        the CPU after lowering one on the meta device)."""
        routing = self.routing.on_module(module.eval()) if self.routing is not None else None
        return replace(self, module=module.eval(), routing=routing)

    def expected(self, *inputs) -> dict[str, np.ndarray]:
        """The module's forward on these arguments, as the program's output tensors hold it
        (float32, leading dims folded into rows)."""
        if self.io is not None:
            return self.io.expected(self.module, inputs)
        if self.routing is not None:
            inputs = self.routing.forward_args(inputs)
        with torch.no_grad():
            out = self.module(*inputs)
        if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
            out = out[0]  # a block returning (hidden_states, extras): the program's output
        if not isinstance(out, torch.Tensor):
            raise LoweringError(f"the module's forward returned a {type(out).__name__}, not "
                                "a tensor")
        name = next(n for n, src in self.tensors.items() if src == "output")
        return {name: _np(out).reshape(-1, out.shape[-1] if out.dim() else 1)}

    def verify(self, seed: int = 0) -> TorchProgram:
        """This program checked against its module on inputs seeded by `seed`: a copy whose
        header and `verification` record the largest error (or why nothing was compared:
        a module too large, or on the meta device). Raises VerificationError (a
        LoweringError) when the simulation differs from the forward."""
        return verify_mod.verify(self, seed)

    def unverified(self, reason: str) -> TorchProgram:
        """A copy whose header says it was not verified, and why."""
        return verify_mod.unverified(self, reason)

    def arg_names(self) -> list[str]:
        """The names of the arguments the program's inputs are, in order: a family's own
        (a decoder layer is called with the attention's arguments as keywords), else the
        module's forward's."""
        names = getattr(self.io, "arg_names", None)
        if names is not None:
            return list(names)
        return [p for p in inspect.signature(self.module.forward).parameters]


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy()


def from_torch(module: torch.nn.Module, example_inputs: tuple,
               schedule: str | dict | None = None, debug: bool = False,
               verify: bool = True, seed: int = 0) -> TorchProgram:
    """Lower `module` (called on `example_inputs`) to a `.step` program.

    `schedule` is a tiling or a dict with an optional `"tiling"` and param values. Dense
    blocks take `"static"` (params `TB`, `TILE_F`); MoE blocks `"static"`, `"dynamic"` or
    `"timemux"` (`TILE_N`, `TILE_F`, `R`, `BW`, ...); decode attention `"interleaved"`,
    `"coarse"` or `"dynamic"` (`R`, `TILE_N`, `BW`, `NB`). Without a tiling, the first.
    Raises LoweringError naming the ATen operator, module path and source line of anything
    it cannot lower; nothing is emitted then. torch's own logging and printed tracebacks
    are silenced unless `debug`.

    The program always passes `stepc check`. With `verify` (the default) its functional
    simulation is compared with the module's forward on inputs seeded by `seed`
    (`TorchProgram.verify`): VerificationError when they differ; a warning when the
    module cannot be run (on the meta device, or too large), which the header records too.
    """
    example_inputs = tuple(example_inputs)
    guards.refuse_nesting(module)
    guards.refuse_arguments(module, example_inputs)
    guards.refuse_empty(module, example_inputs)
    prog = replace(_lower(module.eval(), example_inputs, schedule, debug),
                   example=example_inputs)
    if not verify:
        verify_mod.check_program(prog.text)
        return prog.unverified("verify=False")
    prog = prog.verify(seed)
    if not prog.verification.verified:
        warnings.warn(f"stepc.from_torch: {prog.verification.summary}", stacklevel=2)
    return prog


def _lower(module: torch.nn.Module, example_inputs: tuple, schedule: str | dict | None,
           debug: bool) -> TorchProgram:
    """A registered family's lowering of `module`, or its captured graph's."""
    sched = {"tiling": schedule} if isinstance(schedule, str) else dict(schedule or {})
    tiling = sched.pop("tiling", None)
    match = families.match(module)
    family = match.family if match is not None and not match.override else None
    if family is None:  # a decoder layer, read from its own forward (an override too)
        family = decoder_structure.find(module)
    if match is None and family is None:  # an override of a registered forward is traced
        family = moe_structure.find(module, example_inputs)
    if family is not None:
        tiling = tiling or family.tilings[0]
        if tiling not in family.tilings:
            raise LoweringError(f"unknown tiling `{tiling}` for {type(module).__name__} (a "
                                f"{family.kind} block: choose {', '.join(family.tilings)})")
        with quiet(debug):
            return family.lowering()(module, example_inputs, tiling, sched)
    try:
        return _lower_captured(module, example_inputs, tiling, sched, debug)
    except LoweringError as e:
        if match is not None:
            raise type(e)(f"{e}\n({match.refusal()})") from None
        cache = _cache_argument(module)
        if cache is None or isinstance(e, InputRefused):
            raise
        raise _cache_refusal(module, cache, e) from None


# forward arguments by which a module takes a KV cache (transformers' names over versions)
_CACHE_ARGUMENTS = ("past_key_values", "past_key_value", "cache", "layer_past")


def _cache_argument(module: torch.nn.Module) -> str | None:
    """The forward argument by which a block takes a KV cache, if it has one (a whole
    transformers model has refusals of its own)."""
    if any(c.__name__ == "PreTrainedModel" for c in type(module).__mro__):
        return None
    try:
        names = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return None
    return next((n for n in _CACHE_ARGUMENTS if n in names), None)


def _cache_refusal(module: torch.nn.Module, cache: str, error: LoweringError) -> InputRefused:
    """What stepc lowers of a block over a KV cache, for one no lowering applies to."""
    attention = next(f for f in families.FAMILIES if f.kind == "attention")
    takes = ", ".join(inspect.signature(module.forward).parameters)
    why = str(error).split(" (torch.export and torch.fx both failed")[0]
    return InputRefused(
        f"{type(module).__name__}.forward({takes}) takes a KV cache (`{cache}`) and no "
        f"lowering applies to it: {why}. stepc lowers attention over a cache as the "
        f"`{attention.name}` family, called as forward(hidden_states, position_embeddings, "
        f"attention_mask, cache): {attention.doc}; whole decoder layers of such an attention "
        "(`decoder-by-structure`) and causal LMs of them (docs/torch.md)")


def _lower_captured(module: torch.nn.Module, example_inputs: tuple, tiling: str | None,
                    sched: dict, debug: bool) -> TorchProgram:
    """The module captured as a graph and lowered node by node (a dense block), or as the
    MoE or decode attention it computes."""
    nodes = capture(module, example_inputs, debug)
    guards.refuse_empty_nodes(nodes)
    attention = is_attention(nodes) and not any(n.op == "topk" for n in nodes)
    tiling = tiling or ("interleaved" if attention else "static")
    w = StepWriter()
    cls = type(module)
    try:
        src = inspect.getsourcefile(cls)
    except TypeError:  # a class defined interactively
        src = None
    w.header += [f"{cls.__name__} ({os.path.basename(src) if src else cls.__module__}), "
                 f"lowered by `stepc from-torch` ({tiling} tiling).", ""]
    if any(n.op == "topk" for n in nodes):
        if tiling not in MOE_TILINGS:
            raise LoweringError(f"unknown tiling `{tiling}` for a MoE block (choose "
                                f"{', '.join(MOE_TILINGS)})")
        tensors, (ids, weights) = lower_moe(nodes, w, tiling, sched)
        return TorchProgram(w.render(), tensors, module, {"tiling": tiling, **sched},
                            RoutingProbe(module, ids, weights))
    if attention:
        if tiling not in ATTENTION_TILINGS:
            raise LoweringError(f"unknown tiling `{tiling}` for decode attention (choose "
                                f"{', '.join(ATTENTION_TILINGS)})")
        tensors, layout, roles = lower_attention(nodes, w, tiling, sched)
        return TorchProgram(w.render(), tensors, module, {"tiling": tiling, **sched},
                            layout=layout, arg_roles=roles)
    if tiling != "static":
        raise LoweringError(f"tiling `{tiling}` applies to top-k MoE blocks; a dense block is "
                            "tiled statically (its params TB and TILE_F)")
    tensors, sched = lower_dense(canonicalise(nodes), w, sched)
    return TorchProgram(w.render(), tensors, module, {"tiling": "static", **sched})




def load_module(spec: str):
    """`FILE.py:NAME` or `package.module:NAME` -> the module class or factory it names."""
    try:
        return load_target(spec)
    except BuildError as e:
        raise LoweringError(str(e)) from None
