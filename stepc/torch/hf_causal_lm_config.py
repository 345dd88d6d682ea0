"""Whole causal LMs from a transformers config (`--hf-config CONFIG.json --whole-model`):
the model its `model_type` names (or a given class), with its first N decoder layers,
built on the meta device at the config's dims (Llama-3-8B needs no memory) and lowered by
the causal-LM family (stepc/torch/hf_causal_lm.py) for one decode step; verified on a CPU
copy with seeded weights when it fits."""

from __future__ import annotations

import warnings
from dataclasses import replace

import torch

from stepc.torch import families
from stepc.torch.build import BuildError, seed_transformers_weights
from stepc.torch.capture import LoweringError, quiet
from stepc.torch.families import DECODER_TILINGS
from stepc.torch.hf_causal_lm import lower_hf_causal_lm, whole_model_hint
from stepc.torch.hf_model import DEFAULT_BATCH, DEFAULT_PAST, DTYPES, hf_config, truncated_config
from stepc.torch.verify import check_program, too_large


def build_causal_lm(config, layers: int | None = None, device: str = "meta",
                    dtype: str = "f32", seed: int | None = None, cls=None):
    """The causal LM `config` describes (AutoModelForCausalLM, or `cls`) with its first
    `layers` decoder layers (all by default), on `device`; with `seed`, its weights drawn
    as transformers' initialisation would."""
    import transformers
    cfg = truncated_config(config, config.num_hidden_layers if layers is None else layers,
                           dtype)
    if cls is None and not getattr(cfg, "model_type", ""):
        raise BuildError("the config has no `model_type` (e.g. \"llama\", \"qwen3_moe\"): "
                         "it names the causal LM to build")
    if seed is not None:
        torch.manual_seed(seed)
    try:
        with torch.device(device):
            model = cls(cfg) if cls is not None else \
                transformers.AutoModelForCausalLM.from_config(cfg)
    except Exception as e:  # noqa: BLE001 - the config's values reach transformers' code
        lines = str(e).strip().splitlines()
        raise BuildError(f"model_type `{getattr(cfg, 'model_type', '?')}`: transformers "
                         f"builds no causal LM from this config ({type(e).__name__}: "
                         f"{lines[0] if lines else ''})") from None
    model.eval().to(DTYPES[dtype])
    if seed is not None:
        seed_transformers_weights(model, cfg)
    return model


def decode_example(model, batch: int, past: int, device: str = "meta") -> tuple:
    """(input_ids, attention_mask, position_ids, cache) shaped for one decode step of
    `batch` requests over `past` cached positions (zeros off the meta device)."""
    from transformers.cache_utils import DynamicCache
    if batch < 1 or past < 1:
        raise BuildError(f"batch {batch} and past {past}: a whole model decodes a positive "
                         "batch over at least one cached position")
    cfg, dt = model.config, next(model.parameters()).dtype
    shape = (batch, cfg.num_key_value_heads, past, model.model.layers[0].self_attn.head_dim)
    with torch.device(device):
        cache = DynamicCache()
        for i in range(len(model.model.layers)):
            cache.update(torch.zeros(shape, dtype=dt), torch.zeros(shape, dtype=dt), i)
        return (torch.zeros(batch, 1, dtype=torch.long),
                torch.ones(batch, past + 1, dtype=torch.long),
                torch.zeros(batch, 1, dtype=torch.long), cache)


def refuse_unregistered(model) -> None:
    """Refuse a model no causal-LM family lowers, saying what stepc lowers of it."""
    match = families.match(model)
    if match is None or match.family.kind != "model":
        raise LoweringError(f"{type(model).__name__} (model_type "
                            f"`{getattr(model.config, 'model_type', '?')}`): no registered "
                            f"causal-LM family lowers it; {whole_model_hint(model)}")
    if match.override:
        raise LoweringError(f"{type(model).__name__}: {match.refusal()}")


def from_hf_causal_lm(config, layers: int | None = None, batch: int = DEFAULT_BATCH,
                      past: int = DEFAULT_PAST, schedule: str | dict | None = None,
                      dtype: str = "f32", debug: bool = False, verify: bool = True,
                      seed: int = 0, cls=None):
    """The causal LM `config` describes (a transformers config, a dict with `model_type`,
    or a config.json path; the class `cls`, else its AutoModelForCausalLM) with its first
    `layers` decoder layers (all by default), lowered as one program for one decode step
    of `batch` requests over `past` cached positions. Built on the meta device at the
    config's dims; with `verify` (the default) the program is verified on a CPU copy built
    with `seed` (a warning, and the header, say when it is too large to run)."""
    sched = {"tiling": schedule} if isinstance(schedule, str) else dict(schedule or {})
    tiling = sched.pop("tiling", None) or DECODER_TILINGS[0]
    if tiling not in DECODER_TILINGS:
        raise LoweringError(f"unknown tiling `{tiling}` for a causal LM (choose "
                            f"{', '.join(DECODER_TILINGS)})")
    cfg = hf_config(config)
    with quiet(debug):
        model = build_causal_lm(cfg, layers, "meta", dtype, cls=cls)
    refuse_unregistered(model)
    example = decode_example(model, batch, past)
    with quiet(debug):
        prog = replace(lower_hf_causal_lm(model, example, tiling, sched), example=example)
    reason = too_large(model) if verify else "verify=False"
    if reason:
        check_program(prog.text)
        prog = prog.unverified(reason)
        if verify:
            warnings.warn(f"stepc.from_hf_causal_lm: {prog.verification.summary}",
                          stacklevel=2)
        return prog
    with quiet(debug):
        real = build_causal_lm(cfg, layers, "cpu", dtype, seed=seed, cls=cls)
    return prog.on_module(real).verify(seed).on_module(model)
