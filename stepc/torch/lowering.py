"""`from_torch`: a module lowered to a `TorchProgram` (a block family recognised by class, or
the captured graph canonicalised and lowered node by node)."""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from stepc.torch import families, moe_structure
from stepc.torch.attention import ATTENTION_TILINGS, AttentionLayout, is_attention, lower_attention
from stepc.torch.build import BuildError, load_target
from stepc.torch.canon import canonicalise
from stepc.torch.capture import LoweringError, capture, quiet
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

    def values(self, *inputs: torch.Tensor) -> dict[str, np.ndarray]:
        """The program's tensor values (float32) for these forward arguments: the module's
        weights, the inputs, and for a MoE block the routing weights its router computes."""
        if self.io is not None:
            return self.io.values(self.module, inputs)
        state = self.module.state_dict()
        args = dict(zip(self._arg_names(), inputs))
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
            args = dict(zip(self._arg_names(), inputs))
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
        for name, t in zip(self._arg_names(), example):
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

    def _arg_names(self) -> list[str]:
        return [p for p in inspect.signature(self.module.forward).parameters]


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy()


def from_torch(module: torch.nn.Module, example_inputs: tuple,
               schedule: str | dict | None = None, debug: bool = False) -> TorchProgram:
    """Lower `module` (called on `example_inputs`) to a `.step` program.

    `schedule` is a tiling or a dict with an optional `"tiling"` and param values. Dense
    blocks take `"static"` (params `TB`, `TILE_F`); MoE blocks `"static"`, `"dynamic"` or
    `"timemux"` (`TILE_N`, `TILE_F`, `R`, `BW`, ...); decode attention `"interleaved"`,
    `"coarse"` or `"dynamic"` (`R`, `TILE_N`, `BW`, `NB`). Without a tiling, the first.
    Raises LoweringError naming the ATen operator, module path and source line of anything
    it cannot lower; nothing is emitted then. torch's own logging and printed tracebacks
    are silenced unless `debug`.
    """
    sched = {"tiling": schedule} if isinstance(schedule, str) else dict(schedule or {})
    tiling = sched.pop("tiling", None)
    module = module.eval()
    family = families.find(module) or moe_structure.find(module, example_inputs)
    if family is not None:
        tiling = tiling or family.tilings[0]
        if tiling not in family.tilings:
            raise LoweringError(f"unknown tiling `{tiling}` for {type(module).__name__} (a "
                                f"{family.kind} block: choose {', '.join(family.tilings)})")
        with quiet(debug):
            return family.lowering()(module, example_inputs, tiling, sched)
    nodes = capture(module, example_inputs, debug)
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
