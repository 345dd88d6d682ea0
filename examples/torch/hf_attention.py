"""transformers' own decode attention classes at small sizes, for `stepc from-torch`.

    stepc from-torch examples/torch/hf_attention.py:SmallQwen3Attention \\
        --input hidden_states=f32[8,1,64] --input position_embeddings=f32[2,8,1,16] \\
        --input attention_mask=f32[8,1,1,33] --schedule dynamic --param R=2 \\
        --param TILE_N=8 -o attn.step --weights-out attn.safetensors \\
        --external-out kv_lens=lens.npy
    stepc sim attn.step --weights attn.safetensors --trace kv_lens=lens.npy

One new token for each of B = 8 requests over a cache padded to P = 32 positions (the
mask's last dim is P + 1: the cached positions and the new token). `position_embeddings`
stacks (cos, sin); `--weights-out` builds a seeded DynamicCache, lengths and mask.
Needs `pip install transformers`.
"""

from transformers import LlamaConfig, Qwen3Config
from transformers.models.llama.modeling_llama import LlamaAttention
from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention

SIZES = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "intermediate_size": 128, "num_hidden_layers": 1}


class SmallQwen3Attention(Qwen3Attention):
    """Qwen3's attention (q/k RMS norms, GQA 2:1), hidden 64, head dim 16."""

    def __init__(self):
        super().__init__(Qwen3Config(**SIZES), layer_idx=0)


class SmallLlamaAttention(LlamaAttention):
    """Llama's attention (GQA 2:1), hidden 64, head dim 16."""

    def __init__(self):
        super().__init__(LlamaConfig(**SIZES), layer_idx=0)
