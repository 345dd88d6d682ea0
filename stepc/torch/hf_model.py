"""Whole models from a transformers config: the first N decoder layers of the model a config
describes (its `model_type` picks the transformers model class), lowered as one program
(stepc/torch/hf_decoder.py) in decode: B requests, one new token each, over a KV cache of
P cached positions per request. Built on the meta device when only the program is wanted,
so a model's real dims (Qwen3-30B-A3B, Mixtral-8x7B) need no memory.

The program runs the layers one after another as programs/decoder_*.step do, each with its
own weights and KV cache; the KV lengths (`kv_lens`) are shared by the layers (the same
requests) and each layer reads its own routing trace (`routing_0`, `routing_1`, ...).
The embedding, the final norm and the LM head are outside the program (the whole model,
with them: stepc/torch/hf_causal_lm.py).
"""

from __future__ import annotations

import contextlib
import copy
import textwrap
import warnings
from dataclasses import replace

import torch

from stepc.torch.build import BuildError
from stepc.torch.capture import LoweringError, quiet
from stepc.torch.hf_decoder import compose, schedule_doc
from stepc.torch.hf_decoder_structure import read_structure
from stepc.torch.verify import check_program, too_large

DEFAULT_BATCH = 64   # the paper's decode batch
DEFAULT_PAST = 1023  # cached positions per request: KV slots of 1024 rows
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


class DecoderStack(torch.nn.Module):
    """The first decoder layers of a model, run in turn as the model runs them between its
    embedding and its final norm; `rotary_emb` gives the position embeddings."""

    def __init__(self, layers, rotary_emb, config):
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)
        self.rotary_emb = rotary_emb
        self.config = config

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None,
                cache=None):
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask=attention_mask, cache=cache,
                                  position_embeddings=position_embeddings)
        return hidden_states


def hf_config(config):
    """A transformers config from a config object, a dict with `model_type`, or the path of
    a config.json."""
    import transformers
    if isinstance(config, transformers.PretrainedConfig):
        return config
    if isinstance(config, str):
        from stepc.torch.build import load_hf_config
        return load_hf_config(config, None)
    if isinstance(config, dict):
        data = dict(config)
        model_type = data.pop("model_type", None)
        if model_type is None:
            raise BuildError("the config has no `model_type` (e.g. \"qwen3_moe\", \"llama\")")
        try:
            return transformers.AutoConfig.for_model(model_type, **data)
        except Exception as e:  # noqa: BLE001 - a config class validates its fields as it likes
            why = " ".join(str(e).split())[:400]
            raise BuildError(f"config of model_type `{model_type}`: {type(e).__name__}: "
                             f"{why}") from None
    raise BuildError(f"expected a transformers config, a dict or a path, not "
                     f"{type(config).__name__}")


def build_stack(config, layers: int, device: str = "meta", dtype: str = "f32",
                seed: int | None = None) -> DecoderStack:
    """The model's first `layers` decoder layers (with the model's rotary embedding), on
    `device`; with `seed`, its matrices drawn as transformers' initialisation would."""
    import transformers
    cfg = truncated_config(config, layers, dtype)
    model_type = getattr(cfg, "model_type", "?")
    if seed is not None:
        torch.manual_seed(seed)
    try:
        with torch.device(device):
            model = transformers.AutoModel.from_config(cfg)
    except Exception as e:  # noqa: BLE001 - a model's constructor checks its config as it likes
        why = " ".join(str(e).split())[:400]
        raise BuildError(f"model_type `{model_type}`: transformers builds no model from the "
                         f"config ({type(e).__name__}: {why})") from None
    model.eval().to(DTYPES[dtype])
    found = getattr(model, "layers", None)
    if not isinstance(found, torch.nn.ModuleList) or not hasattr(model, "rotary_emb"):
        raise LoweringError(f"{type(model).__name__} (model_type `{model_type}`): expected "
                            "decoder layers in `layers` and a `rotary_emb`")
    for i, layer in enumerate(found):
        read_structure(layer, f"{type(model).__name__}.layers.{i}, model_type `{model_type}`",
                       cfg.hidden_size, DTYPES[dtype])
    if seed is not None:
        _seed_matrices(found, cfg)
    return DecoderStack(list(found), model.rotary_emb, cfg)


def truncated_config(config, layers: int, dtype: str):
    """A copy of `config` with its first `layers` decoder layers (refusing a count the model
    does not have, or a dtype not lowered)."""
    total = getattr(config, "num_hidden_layers", None)
    if not isinstance(layers, int) or layers < 1 or (total is not None and layers > total):
        raise BuildError(f"--layers {layers}: the model has {total} decoder layers (choose 1 "
                         f"to {total})")
    if dtype not in DTYPES:
        raise BuildError(f"dtype `{dtype}`: choose {' or '.join(DTYPES)}")
    cfg = copy.deepcopy(config)
    try:
        cfg.num_hidden_layers = layers
    except (AttributeError, NotImplementedError) as e:  # a model whose layers are counted
        raise BuildError(f"--layers {layers}: {type(cfg).__name__} does not take a number "
                         f"of decoder layers ({e})") from None
    if getattr(cfg, "layer_types", None):
        with contextlib.suppress(AttributeError):  # a property computed from the count
            cfg.layer_types = cfg.layer_types[:layers]
    return cfg


def _seed_matrices(layers, config) -> None:
    from stepc.torch.build import seed_transformers_weights
    for layer in layers:
        seed_transformers_weights(layer, config)


def example_inputs(stack: DecoderStack, batch: int, past: int, dtype: str,
                   device: str = "meta") -> tuple:
    """(hidden_states, (cos, sin), attention_mask, cache) shaped for one decode step of
    `batch` requests over `past` cached positions (values only off the meta device)."""
    from transformers.cache_utils import DynamicCache
    if batch < 1 or past < 0:
        raise BuildError(f"batch {batch} and past {past}: expected a positive batch and a "
                         "non-negative number of cached positions")
    cfg, dt = stack.config, DTYPES[dtype]
    attn = stack.layers[0].self_attn
    head_dim, kv = attn.head_dim, cfg.num_key_value_heads
    with torch.device(device):
        hs = torch.zeros(batch, 1, cfg.hidden_size, dtype=dt)
        pe = (torch.zeros(batch, 1, head_dim, dtype=dt), torch.zeros(batch, 1, head_dim,
                                                                      dtype=dt))
        mask = torch.zeros(batch, 1, 1, past + 1, dtype=dt)
        cache = DynamicCache()
        for i in range(len(stack.layers)):
            shape = (batch, kv, past, head_dim)
            cache.update(torch.zeros(shape, dtype=dt), torch.zeros(shape, dtype=dt), i)
    return hs, pe, mask, cache


def from_hf_config(config, layers: int = 1, batch: int = DEFAULT_BATCH,
                   past: int = DEFAULT_PAST, schedule: str | dict | None = None,
                   dtype: str = "f32", debug: bool = False, verify: bool = True,
                   seed: int = 0):
    """The first `layers` decoder layers of the model `config` describes (a transformers
    config, a dict with `model_type`, or a config.json path), lowered as one program for
    one decode step of `batch` requests over `past` cached positions. `schedule`: a tiling
    (`static`, `dynamic`, `timemux`) or a dict with `"tiling"` and part params (`attn_R`,
    `moe_TILE_N`, ...). Built on the meta device; `program.on_module(build_stack(config,
    layers, "cpu", seed=0))` gives values, traces and seeded inputs of real weights. With
    `verify` (the default), the program is verified on such a copy built with `seed`
    (`TorchProgram.verify`; a warning, and the header, say when the layers are too large
    to run on the CPU)."""
    sched = {"tiling": schedule} if isinstance(schedule, str) else dict(schedule or {})
    tiling = sched.pop("tiling", None) or "static"
    cfg = hf_config(config)
    stack = build_stack(cfg, layers, "meta", dtype)
    example = example_inputs(stack, batch, past, dtype)
    first = stack.layers[0]

    def title(structures) -> list[str]:
        moe = any(st.ffn_kind == "moe" for st in structures)
        return [*textwrap.wrap(
            f"The first {layers} decoder layer{'s' if layers > 1 else ''} of a "
            f"{cfg.model_type} model ({type(first).__name__}: hidden {cfg.hidden_size}, "
            f"{cfg.num_attention_heads} query and {cfg.num_key_value_heads} KV heads; "
            f"{structures[0].describe()}), one decode step of {batch} requests over {past} "
            f"cached positions, lowered by `stepc from-torch --layers` "
            f"({schedule_doc(tiling, moe)}).", 86), "",
            *textwrap.wrap("KV lengths: --trace kv_lens=LENS.npy (int [B], every layer)."
                           + (" Routing: --trace routing_L=IDS.npy ([B, K] expert ids) for "
                              "layer L." if moe else ""), 86)]

    with quiet(debug):
        prog = compose(list(stack.layers), example, tiling, sched, title, stack,
                       lambda m: list(m.layers), per_layer_routing=True)
    prog = replace(prog, example=example)
    reason = too_large(stack) if verify else "verify=False"
    if reason:
        check_program(prog.text)
        prog = prog.unverified(reason)
        if verify:
            warnings.warn(f"stepc.from_hf_config: {prog.verification.summary}", stacklevel=2)
        return prog
    real = build_stack(cfg, layers, "cpu", dtype, seed=seed)
    return prog.on_module(real).verify(seed).on_module(stack)
