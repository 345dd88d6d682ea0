"""The values, traces and seeded inputs of a decoder program (stepc/torch/hf_decoder.py):
one forward of the module, each part's program values taken as the part is called."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch

from stepc.torch.capture import LoweringError
from stepc.torch.fragment import Fragment
from stepc.torch.verify import VerificationError


@dataclass
class LayerPart:
    """One part of one layer: its lowering (a whole program), as a fragment."""

    path: str                 # attribute of the layer: "self_attn", "mlp", ...
    program: object           # the part's TorchProgram (its values and traces)
    fragment: Fragment
    kind: str                 # "norm", "attention", "moe" or "mlp"


class DecoderIO:
    """Values, traces and seeded inputs of a decoder program: one forward of the module,
    each part's values taken as the part is called (before the attention appends to the
    cache)."""

    arg_names = ("hidden_states", "position_embeddings", "attention_mask", "cache")

    def __init__(self, parts: list[dict], layers_of, per_layer_routing: bool):
        self.parts, self.layers_of = parts, layers_of
        self.per_layer_routing = per_layer_routing

    def run(self, module, args: tuple) -> tuple[dict, dict]:
        if len(args) != 4:
            raise LoweringError("a decoder layer takes (hidden_states, position_embeddings, "
                                f"attention_mask, cache), given {len(args)} arguments")
        hs, pe, mask, cache = args
        values = {"HIDDEN_STATES": _np(hs).reshape(-1, hs.shape[-1])}
        traces: dict[str, np.ndarray] = {}
        self.taking(module, values, traces, lambda: _forward(module, args))
        return values, traces

    def taking(self, module, values: dict, traces: dict, forward) -> None:
        """Call `forward()` with each part's values and traces taken into `values` and
        `traces` as the part is called."""
        hooks = []
        for li, (layer, parts) in enumerate(zip(self.layers_of(module), self.parts)):
            for path, part in parts.items():
                hooks.append(getattr(layer, path).register_forward_pre_hook(
                    self._take(li, part, values, traces), with_kwargs=True))
        try:
            forward()
        finally:
            for h in hooks:
                h.remove()

    def _take(self, li: int, part: LayerPart, values: dict, traces: dict):
        def hook(sub, args, kwargs):
            prog = part.program.on_module(sub)
            if part.kind == "attention":
                inputs = (kwargs.get("hidden_states", args[0] if args else None),
                          kwargs.get("position_embeddings"), kwargs.get("attention_mask"),
                          kwargs.get("cache"))
            else:
                x = args[0] if args else kwargs["hidden_states"]
                inputs = (x.reshape(-1, x.shape[-1]),)
            keep = {n for n, _, _ in part.fragment.tensors}
            for name, arr in prog.values(*inputs).items():
                renamed = part.fragment.names.get(name)
                if renamed in keep:
                    values[renamed] = _np(arr) if isinstance(arr, torch.Tensor) else arr
            for name, arr in prog.traces(*inputs).items():
                if name == "routing" and self.per_layer_routing:
                    name = f"routing_{li}"
                traces[name] = arr
        return hook

    def values(self, module, inputs: tuple) -> dict[str, np.ndarray]:
        return self._once(module, inputs)[0]

    def expected(self, module, inputs: tuple) -> dict[str, np.ndarray]:
        """The output Y: the module's forward (on a copy of the cache), [B, 1, D] as [B, D]."""
        out = _forward(module, inputs)
        out = out[0] if isinstance(out, tuple) else out
        return {"Y": _np(out).reshape(-1, inputs[0].shape[-1])}

    def traces(self, module, inputs: tuple) -> dict[str, np.ndarray]:
        return self._once(module, inputs)[1]

    def _once(self, module, inputs: tuple) -> tuple[dict, dict]:
        """`run`, once for the values and the traces of the same module and inputs."""
        last = getattr(self, "_last", None)
        if last is None or last[0] is not module or len(last[1]) != len(inputs) or \
                any(a is not b for a, b in zip(last[1], inputs)):
            self._last = (module, tuple(inputs), self.run(module, inputs))
        return self._last[2]

    def seeded_inputs(self, module, example: tuple, seed: int) -> tuple:
        """The attention's seeded inputs (hidden_states, (cos, sin), an additive mask, a
        DynamicCache holding every layer's past)."""
        last = self.layers_of(module)[-1]
        path, att = next((k, v) for k, v in self.parts[-1].items() if v.kind == "attention")
        return att.program.io.seeded_inputs(getattr(last, path), example, seed)


def _forward(module, args: tuple):
    """The module's forward on (hidden_states, position_embeddings, attention_mask, cache),
    called as transformers' model calls a layer, on a copy of the cache."""
    hs, pe, mask, cache = args
    try:
        with torch.no_grad():
            return module(hs, attention_mask=mask, cache=copy.deepcopy(cache),
                          position_embeddings=pe)
    except LoweringError:
        raise
    except Exception as e:  # noqa: BLE001 - the module's own forward may raise anything
        text = str(e).strip().splitlines()
        raise VerificationError(f"running the module on these inputs failed: "
                                f"{type(e).__name__}: {text[0] if text else ''}") from None


def _np(t) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy() if isinstance(t, torch.Tensor) else t
