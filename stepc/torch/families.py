"""Block families lowered as leaves: modules whose forward cannot be captured as a plain
graph of tensor operators (a routed-expert loop that depends on the routing, an attention
over a KV cache object), recognised by class before capture and lowered from their weights
and config by a family-specific function.

Each entry is declarative (class names, kind, tilings, the lowering function as a dotted
`module:function` path), so that the registry can be listed and documented without importing
torch or transformers. A lowering function takes `(module, example_inputs, tiling, schedule)`
and returns a `stepc.torch.TorchProgram`; it raises `LoweringError` for what it cannot lower.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """One family of blocks stepc lowers whole."""

    name: str                 # a short name, e.g. "mixtral-moe"
    classes: tuple[str, ...]  # class names matched against the module's class and its bases
    kind: str                 # "moe", "attention", ...
    tilings: tuple[str, ...]  # the schedules it supports; the first is the default
    lower: str                # "package.module:function"
    doc: str                  # one line for the support table

    def lowering(self):
        """The lowering function (imported on first use)."""
        mod, _, fn = self.lower.partition(":")
        return getattr(importlib.import_module(mod), fn)


FAMILIES: list[Family] = [
    Family("hf-decode-attention", ("LlamaAttention", "Qwen3Attention", "Qwen2Attention",
                                   "MistralAttention"), "attention",
           ("interleaved", "coarse", "dynamic"), "stepc.torch.hf_attention:lower_hf_attention",
           "transformers decode attention (one new token per request, a DynamicCache, GQA, "
           "RoPE, q/k norms, biases, eager or SDPA); KV lengths from the attention mask"),
]


def find(module) -> Family | None:
    """The family of `module`'s class (or of its nearest base class that has one)."""
    for cls in type(module).__mro__:
        for fam in FAMILIES:
            if cls.__name__ in fam.classes:
                return fam
    return None
