"""Block families lowered as leaves: modules whose forward cannot be captured as a plain
graph of tensor operators (a routed-expert loop that depends on the routing, an attention
over a KV cache object), recognised by class before capture and lowered from their weights
and config by a family-specific function.

Each entry is declarative (class names, kind, tilings, the lowering function as a dotted
`module:function` path), so that the registry can be listed and documented without importing
torch or transformers. A lowering function takes `(module, example_inputs, tiling, schedule)`
and returns a `stepc.torch.TorchProgram`; it raises `LoweringError` for what it cannot lower.

A family lowers what transformers' class computes, read from its weights, not the module's
own code: it applies only when the forward the module runs is the registered class's own,
and every part it reads (the experts, the projections) runs transformers' or torch's code.
A subclass overriding forward, a forward hook, or a part of the user's is captured as any
other module instead (`match` says what displaced the family); a decoder layer is lowered
as its own forward composes its parts (the decoder-by-structure family).
"""

from __future__ import annotations

import importlib
import inspect
import os
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
    runs: tuple[str, ...] = ()  # parts it calls, or lowers on their own: their code is theirs

    def lowering(self):
        """The lowering function (imported on first use)."""
        mod, _, fn = self.lower.partition(":")
        return getattr(importlib.import_module(mod), fn)


# transformers' decode attention (stepc/torch/hf_attention.py): the classes tested by name,
# and any other of transformers' attention classes with their parts (hf_attention_forms.py)
HF_ATTENTION = Family(
    "hf-decode-attention", ("LlamaAttention", "Qwen3Attention", "Qwen2Attention",
                            "MistralAttention", "Qwen3MoeAttention", "MixtralAttention",
                            "Phi3Attention", "GemmaAttention", "Gemma2Attention",
                            "Gemma3Attention"),
    "attention", ("interleaved", "coarse", "dynamic"),
    "stepc.torch.hf_prefill:lower_hf_decode_or_prefill",
    "transformers attention over a DynamicCache in decode (one new token per request) or "
    "prefill (S new tokens, causal; by the shape of hidden_states), GQA, RoPE or "
    "partial rotary, q/k RMS norms (w or 1 + w), biases, fused qkv_proj, logit soft-capping, "
    "eager or SDPA); KV lengths from the attention mask; other transformers classes by their "
    "parts (q/k/v or qkv_proj, o_proj, head_dim, scaling)")
FAMILIES: list[Family] = [HF_ATTENTION]

# Hugging Face transformers' sparse MoE blocks (stepc/torch/hf_moe.py): router ahead of the
# program, fused SwiGLU experts, optional shared expert
MOE_TILINGS = ("static", "dynamic", "timemux")
_HF_MOE = "stepc.torch.hf_moe:lower_hf_moe"
_ROUTER = ("gate",)  # runs ahead of the program, as the module calls it
FAMILIES += [
    Family("mixtral-moe", ("MixtralSparseMoeBlock",), "moe", MOE_TILINGS, _HF_MOE,
           "Mixtral sparse MoE: softmax router, top-k renormalised, SwiGLU experts",
           _ROUTER),
    Family("qwen3-moe", ("Qwen3MoeSparseMoeBlock",), "moe", MOE_TILINGS, _HF_MOE,
           "Qwen3-MoE sparse MoE: softmax router, top-k (norm_topk_prob), SwiGLU experts",
           _ROUTER),
    Family("qwen2-moe", ("Qwen2MoeSparseMoeBlock",), "moe", MOE_TILINGS, _HF_MOE,
           "Qwen2-MoE sparse MoE: softmax router, top-k (norm_topk_prob), SwiGLU experts, "
           "a shared expert scaled by its sigmoid gate",
           _ROUTER),
    Family("deepseek-v3-moe", ("DeepseekV3MoE",), "moe", MOE_TILINGS, _HF_MOE,
           "DeepSeek-V3 MoE: sigmoid router, group-limited top-k with correction bias, "
           "norm_topk_prob, routed_scaling_factor, SwiGLU experts, shared experts",
           _ROUTER),
    Family("deepseek-v2-moe", ("DeepseekV2Moe",), "moe", MOE_TILINGS, _HF_MOE,
           "DeepSeek-V2 MoE: softmax router, greedy or group-limited top-k, "
           "routed_scaling_factor, SwiGLU experts, shared experts",
           _ROUTER),
    Family("olmoe-moe", ("OlmoeSparseMoeBlock",), "moe", MOE_TILINGS, _HF_MOE,
           "OLMoE sparse MoE: softmax router, top-k, SwiGLU experts",
           _ROUTER),
    Family("minimax-moe", ("MiniMaxSparseMoeBlock",), "moe", MOE_TILINGS, _HF_MOE,
           "MiniMax sparse MoE: softmax router, top-k renormalised, SwiGLU experts",
           _ROUTER),
    Family("qwen3-next-moe", ("Qwen3NextSparseMoeBlock",), "moe", MOE_TILINGS, _HF_MOE,
           "Qwen3-Next sparse MoE: softmax router, top-k, SwiGLU experts, a shared expert "
           "scaled by its sigmoid gate",
           _ROUTER),
    Family("glm4-moe", ("Glm4MoeMoE",), "moe", MOE_TILINGS, _HF_MOE,
           "GLM-4-MoE: DeepSeek-V3's sigmoid group-limited router with correction bias, "
           "SwiGLU experts, shared experts",
           _ROUTER),
    Family("ernie4.5-moe", ("Ernie4_5_MoeSparseMoeBlock",), "moe", MOE_TILINGS, _HF_MOE,
           "ERNIE-4.5-MoE: softmax router with correction bias, SwiGLU experts, shared "
           "experts",
           _ROUTER),
    Family("hunyuan-moe", ("HunYuanMoEV1Moe",), "moe", MOE_TILINGS, _HF_MOE,
           "HunYuan-MoE-V1: softmax router, top-k, SwiGLU experts, a shared MLP",
           _ROUTER),
]

# sparse MoE blocks of any class, recognised by their parts (stepc/torch/moe_structure.py:
# its `find` returns this entry; no class name selects it)
STRUCTURAL_MOE = Family(
    "moe-by-structure", (), "moe", MOE_TILINGS, "stepc.torch.moe_parts:lower_structural_moe",
    "any sparse MoE block of a router (the child feeding the top-k or the experts' routing, "
    "run ahead of the program) and SwiGLU experts: fused gate_up_proj / down_proj, DBRX's "
    "stacked mlp.w1 / v1 / w2, or a ModuleList of MLPs; an optional shared SwiGLU expert "
    "and its sigmoid gate (tested: GraniteMoeMoE, PhimoeSparseMoeBlock, JambaSparseMoeBlock, "
    "DbrxFFN, Lfm2MoeSparseMoeBlock, MiniMaxM2SparseMoeBlock, DeepseekV32MoE, "
    "FlintSparseMoeBlock, hand-written top-k loops)")
FAMILIES += [STRUCTURAL_MOE]

# transformers' decoder layers (stepc/torch/hf_decoder.py): norms, decode attention, residuals,
# a dense MLP or a sparse MoE, composed as one program in the order the layer's forward runs
# them (stepc/torch/hf_decoder_structure.py); a schedule pairs the attention's tiling with
# the MoE's, as the bundled decoder programs do
DECODER_TILINGS = ("static", "dynamic", "timemux")
FAMILIES += [
    Family("hf-decoder-layer", ("LlamaDecoderLayer", "Qwen3DecoderLayer", "Qwen2DecoderLayer",
                                "MistralDecoderLayer", "Qwen3MoeDecoderLayer",
                                "MixtralDecoderLayer", "Qwen2MoeDecoderLayer",
                                "Phi3DecoderLayer", "Gemma2DecoderLayer"), "decoder",
           DECODER_TILINGS, "stepc.torch.hf_decoder:lower_hf_decoder_layer",
           "transformers decoder layer in decode or prefill: residual blocks read from its forward "
           "(norms before and after the decode attention and the MLP, dropout as identity), "
           "a dense MLP or a sparse MoE (static: interleaved attention + static MoE; "
           "dynamic: dynamic + dynamic; timemux: dynamic + time-multiplexed MoE)"),
]
# decoder layers of any class, recognised by a child the decode-attention family lowers and
# lowered as their own forward composes their parts (stepc/torch/hf_decoder_structure.py:
# its `find` returns this entry, also for a subclass overriding a registered layer's forward)
STRUCTURAL_DECODER = Family(
    "decoder-by-structure", (), "decoder", DECODER_TILINGS,
    "stepc.torch.hf_decoder:lower_hf_decoder_layer",
    "any module with a decode-attention child whose forward is two residual blocks of norms "
    "around the attention, then around a dense MLP or a sparse MoE (a subclass overriding a "
    "registered layer's forward is lowered as written)")
FAMILIES += [STRUCTURAL_DECODER]

# transformers' causal LMs (stepc/torch/hf_causal_lm.py): the embedding gathered by token
# id, the decoder layers above, the final norm and the LM head, one decode step
FAMILIES += [
    Family("hf-causal-lm", ("LlamaForCausalLM", "Qwen3ForCausalLM", "Qwen2ForCausalLM",
                            "MistralForCausalLM", "Qwen3MoeForCausalLM", "MixtralForCausalLM"),
           "model", DECODER_TILINGS, "stepc.torch.hf_causal_lm:lower_hf_causal_lm",
           "transformers causal LM in decode (input_ids [B, 1], attention mask, position ids, "
           "a DynamicCache): the embedding as a gather of rows by token id, the decoder "
           "layers above, the final RMSNorm, the LM head (tied or not) to logits [B, V]",
           ("model.layers",)),
]


_LIBRARIES = ("torch.", "transformers.")


@dataclass(frozen=True)
class Match:
    """The family registered for a module's class (or its nearest base class that has one),
    and what displaces it ("" when the family lowers the module)."""

    family: Family
    registered: type
    override: str

    def refusal(self) -> str:
        """Why the family does not apply, for a message about the module."""
        return (f"{self.override}, so the {self.family.name} family, which lowers "
                f"{self.registered.__name__}'s own forward, does not apply (the module is "
                "captured as written)")


def match(module) -> Match | None:
    for cls in type(module).__mro__:
        for fam in FAMILIES:
            if cls.__name__ in fam.classes:
                return Match(fam, cls, _override(module, cls, fam))
    owner = _owner(type(module))
    if owner.__module__.startswith("transformers.models."):
        from stepc.torch.hf_attention_forms import looks_like
        if looks_like(module):  # an attention of transformers' by its parts
            return Match(HF_ATTENTION, owner, _override(module, owner, HF_ATTENTION))
    return None


def find(module) -> Family | None:
    """The family that lowers `module`: its class's (or its nearest base class's) when
    nothing displaces it (see the module docstring)."""
    m = match(module)
    return m.family if m is not None and not m.override else None


def _override(module, registered: type, fam: Family) -> str:
    """What displaces the registered class's forward, or a part's library code ("")."""
    if not registered.__module__.startswith("transformers."):
        return (f"`{registered.__qualname__}` ({_source(registered)}) is not transformers' "
                "class of that name")
    if type(module).forward is not registered.forward:
        owner = _owner(type(module))
        return (f"`{owner.__qualname__}.forward` ({_source(owner.forward)}) overrides "
                f"`{registered.__name__}.forward`")
    for path, sub in module.named_modules():
        if any(path == p or path.startswith(f"{p}.") for p in fam.runs):
            continue
        where = f"module `{path}`" if path else "the module"
        if "forward" in vars(sub):
            return f"{where} has its own `forward` attribute"
        if sub._forward_hooks or sub._forward_pre_hooks:
            return f"{where} has a forward hook"
        owner = _owner(type(sub))
        if path and not owner.__module__.startswith(_LIBRARIES):
            return (f"{where} ({type(sub).__name__}) runs `{owner.__qualname__}.forward` "
                    f"({_source(owner.forward)}), not transformers' or torch's")
    return ""


def _owner(cls: type) -> type:
    """The class of `cls`'s MRO that defines the forward it runs."""
    return next(c for c in cls.__mro__ if "forward" in vars(c))


def _source(obj) -> str:
    try:
        return f"{os.path.basename(inspect.getsourcefile(obj))}:{inspect.getsourcelines(obj)[1]}"
    except (TypeError, OSError):
        return getattr(obj, "__module__", "?")
