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
                                   "MistralAttention", "Qwen3MoeAttention", "MixtralAttention"),
           "attention",
           ("interleaved", "coarse", "dynamic"), "stepc.torch.hf_attention:lower_hf_attention",
           "transformers decode attention (one new token per request, a DynamicCache, GQA, "
           "RoPE, q/k norms, biases, eager or SDPA); KV lengths from the attention mask"),
]

# Hugging Face transformers' sparse MoE blocks (stepc/torch/hf_moe.py): router ahead of the
# program, fused SwiGLU experts, optional shared expert
MOE_TILINGS = ("static", "dynamic", "timemux")
_HF_MOE = "stepc.torch.hf_moe:lower_hf_moe"
FAMILIES += [
    Family("mixtral-moe", ("MixtralSparseMoeBlock",), "moe", MOE_TILINGS, _HF_MOE,
           "Mixtral sparse MoE: softmax router, top-k renormalised, SwiGLU experts"),
    Family("qwen3-moe", ("Qwen3MoeSparseMoeBlock",), "moe", MOE_TILINGS, _HF_MOE,
           "Qwen3-MoE sparse MoE: softmax router, top-k (norm_topk_prob), SwiGLU experts"),
    Family("qwen2-moe", ("Qwen2MoeSparseMoeBlock",), "moe", MOE_TILINGS, _HF_MOE,
           "Qwen2-MoE sparse MoE: softmax router, top-k (norm_topk_prob), SwiGLU experts, "
           "a shared expert scaled by its sigmoid gate"),
    Family("deepseek-v3-moe", ("DeepseekV3MoE",), "moe", MOE_TILINGS, _HF_MOE,
           "DeepSeek-V3 MoE: sigmoid router, group-limited top-k with correction bias, "
           "norm_topk_prob, routed_scaling_factor, SwiGLU experts, shared experts"),
    Family("deepseek-v2-moe", ("DeepseekV2Moe",), "moe", MOE_TILINGS, _HF_MOE,
           "DeepSeek-V2 MoE: softmax router, greedy or group-limited top-k, "
           "routed_scaling_factor, SwiGLU experts, shared experts"),
    Family("olmoe-moe", ("OlmoeSparseMoeBlock",), "moe", MOE_TILINGS, _HF_MOE,
           "OLMoE sparse MoE: softmax router, top-k, SwiGLU experts"),
    Family("minimax-moe", ("MiniMaxSparseMoeBlock",), "moe", MOE_TILINGS, _HF_MOE,
           "MiniMax sparse MoE: softmax router, top-k renormalised, SwiGLU experts"),
    Family("qwen3-next-moe", ("Qwen3NextSparseMoeBlock",), "moe", MOE_TILINGS, _HF_MOE,
           "Qwen3-Next sparse MoE: softmax router, top-k, SwiGLU experts, a shared expert "
           "scaled by its sigmoid gate"),
    Family("glm4-moe", ("Glm4MoeMoE",), "moe", MOE_TILINGS, _HF_MOE,
           "GLM-4-MoE: DeepSeek-V3's sigmoid group-limited router with correction bias, "
           "SwiGLU experts, shared experts"),
    Family("ernie4.5-moe", ("Ernie4_5_MoeSparseMoeBlock",), "moe", MOE_TILINGS, _HF_MOE,
           "ERNIE-4.5-MoE: softmax router with correction bias, SwiGLU experts, shared "
           "experts"),
    Family("hunyuan-moe", ("HunYuanMoEV1Moe",), "moe", MOE_TILINGS, _HF_MOE,
           "HunYuan-MoE-V1: softmax router, top-k, SwiGLU experts, a shared MLP"),
]

# sparse MoE blocks of any class, recognised by their parts (stepc/torch/moe_structure.py:
# its `find` returns this entry; no class name selects it)
STRUCTURAL_MOE = Family(
    "moe-by-structure", (), "moe", MOE_TILINGS, "stepc.torch.moe_parts:lower_structural_moe",
    "any sparse MoE block of a router (the child feeding the top-k or the experts' routing, "
    "run ahead of the program) and SwiGLU experts: fused gate_up_proj / down_proj, DBRX's "
    "stacked mlp.w1 / v1 / w2, or a ModuleList of MLPs (tested: GraniteMoeMoE, "
    "PhimoeSparseMoeBlock, JambaSparseMoeBlock, DbrxFFN, Lfm2MoeSparseMoeBlock, "
    "MiniMaxM2SparseMoeBlock, hand-written top-k loops)")
FAMILIES += [STRUCTURAL_MOE]

# transformers' decoder layers (stepc/torch/hf_decoder.py): norms, decode attention, residuals,
# a dense MLP or a sparse MoE, composed as one program; a schedule pairs the attention's
# tiling with the MoE's, as the bundled decoder programs do
DECODER_TILINGS = ("static", "dynamic", "timemux")
FAMILIES += [
    Family("hf-decoder-layer", ("LlamaDecoderLayer", "Qwen3DecoderLayer", "Qwen2DecoderLayer",
                                "MistralDecoderLayer", "Qwen3MoeDecoderLayer",
                                "MixtralDecoderLayer"), "decoder", DECODER_TILINGS,
           "stepc.torch.hf_decoder:lower_hf_decoder_layer",
           "transformers decoder layer in decode: RMSNorms, decode attention, residual adds, "
           "a dense MLP or a registered sparse MoE (static: interleaved attention + static "
           "MoE; dynamic: dynamic + dynamic; timemux: dynamic + time-multiplexed MoE)"),
]


def find(module) -> Family | None:
    """The family of `module`'s class (or of its nearest base class that has one)."""
    for cls in type(module).__mro__:
        for fam in FAMILIES:
            if cls.__name__ in fam.classes:
                return fam
    return None
