"""`stepc from-torch`: lower a PyTorch module to a `.step` program (needs the torch extra;
torch is imported only when the command runs)."""

from __future__ import annotations

import re
import sys

import click

from stepc.cli.common import EXIT_OK, EXIT_PROGRAM, EXIT_USAGE, check_new_output, quick_exit

_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "i64": "int64",
           "i32": "int32"}
_INPUT = re.compile(r"^(\w+)=(\w+)\[(\d+(?:\s*,\s*\d+)*)\]$")


def _parse_input(text: str) -> tuple[str, str, list[int]]:
    m = _INPUT.match(text.replace(" ", ""))
    if not m or m.group(2) not in _DTYPES:
        raise click.UsageError(f"--input {text}: expected NAME=DTYPE[D0,D1,...] with DTYPE one "
                               f"of {', '.join(_DTYPES)}, e.g. x=bf16[64,2048]")
    dims = [int(d) for d in m.group(3).split(",")]
    if not all(0 < d < 2**63 for d in dims):
        raise click.UsageError(f"--input {text}: every dim must be a positive integer below "
                               "2^63")
    return m.group(1), m.group(2), dims


def _examples(torch, args) -> tuple:
    """Meta tensors of the --input shapes (no memory); a shape torch cannot hold is a
    usage error."""
    out = []
    for name, dt, shape in args:
        try:
            out.append(torch.empty(shape, dtype=getattr(torch, _DTYPES[dt])))
        except (RuntimeError, OverflowError, ValueError) as e:
            text = str(e).strip().splitlines()
            raise click.UsageError(f"--input {name}={dt}{shape}: torch cannot make such a "
                                   f"tensor ({text[0] if text else type(e).__name__})") from None
    return tuple(out)


def _parse_external(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name.isidentifier() or not path.endswith(".npy"):
        raise click.UsageError(f"--external-out {text}: expected NAME=FILE.npy, e.g. "
                               "routing=ids.npy")
    return name, path


def _parse_param(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier() or not value.isdigit() or int(value) < 1:
        raise click.UsageError(f"--param {text}: expected NAME=POSITIVE_INTEGER, e.g. "
                               "TILE_F=64")
    return name, int(value)


def _layer_settings(spec, inputs, hf_config, layers, batch, past, dtype, whole) -> None:
    """--layers and --whole-model build the model its config describes, with inputs of
    their own; without them, FILE.py:NAME is needed and the model's settings apply only to
    a causal LM class given without --input (checked once NAME is loaded)."""
    if layers is not None or whole:
        flag = "--whole-model" if whole else "--layers"
        if not hf_config:
            raise click.UsageError(f"{flag} needs --hf-config CONFIG.json (the model's config)")
        if inputs:
            raise click.UsageError(f"{flag} makes its own inputs (--batch requests over --past "
                                   "cached positions); drop --input")
        return
    given = [f for f, v in (("--batch", batch), ("--past", past), ("--dtype", dtype)) if v]
    if given and inputs:
        raise click.UsageError(f"{', '.join(given)} set{'s' if len(given) == 1 else ''} the "
                               "inputs of --layers N and --whole-model; for FILE.py:NAME give "
                               "--input")
    if not spec:
        raise click.UsageError("give FILE.py:NAME (a module class or factory), or "
                               "--hf-config CONFIG.json --layers N (the first N decoder "
                               "layers of the model) or --whole-model (the whole causal LM)")


def _whole_model_class(target):
    """`target` when it is a class a causal-LM family lowers (None otherwise)."""
    from stepc.torch.hf_causal_lm import model_classes
    names = set(model_classes())
    if isinstance(target, type) and any(c.__name__ in names for c in target.__mro__):
        return target
    return None


def _no_inputs(spec, target, layers, whole, batch, past, dtype) -> None:
    """FILE.py:NAME given with no --input, and not a causal LM class: what to give."""
    from stepc.torch.hf_causal_lm import whole_model_hint
    given = [f for f, v in (("--layers", layers), ("--whole-model", whole or None),
                            ("--batch", batch), ("--past", past), ("--dtype", dtype))
             if v is not None]
    hint = whole_model_hint(target)
    if given:
        raise click.UsageError(f"{', '.join(given)} set{'s' if len(given) == 1 else ''} the "
                               f"model --hf-config describes; {spec} is not a causal LM class "
                               "stepc lowers whole (drop it)" + (f". {hint}" if hint else ""))
    raise click.UsageError("give the forward arguments with --input NAME=DTYPE[SHAPE]" +
                           (f". {hint}" if hint else ""))


def _lower_layers(hf_config, layers, batch, past, dtype, schedule, debug):
    """The program of the config's first `layers` decoder layers (on the meta device), and
    a function building them on the CPU with seeded weights."""
    from stepc.torch import hf_model
    config = hf_model.hf_config(hf_config)
    prog = hf_model.from_hf_config(config, layers, batch or hf_model.DEFAULT_BATCH,
                                   hf_model.DEFAULT_PAST if past is None else past, schedule,
                                   dtype or "f32", debug, verify=False)
    return prog, lambda seed: hf_model.build_stack(config, layers, "cpu", dtype or "f32",
                                                   seed=seed)


def _lower_whole(hf_config, layers, batch, past, dtype, schedule, debug, cls=None):
    """The program of the whole causal LM the config describes (`cls`, else its
    AutoModelForCausalLM) with its first `layers` decoder layers (all by default), on the
    meta device, and a function building it on the CPU with seeded weights."""
    from stepc.torch import hf_causal_lm_config as lm
    from stepc.torch.build import load_hf_config
    config = load_hf_config(hf_config, cls)  # without model_type: the class's
    prog = lm.from_hf_causal_lm(config, layers, batch or lm.DEFAULT_BATCH,
                                lm.DEFAULT_PAST if past is None else past, schedule,
                                dtype or "f32", debug, verify=False, cls=cls)
    return prog, lambda seed: lm.build_causal_lm(config, layers, "cpu", dtype or "f32",
                                                 seed=seed, cls=cls)


def _hint(module, error: Exception) -> str:
    """For a whole model that was refused: what stepc lowers of whole models (unless the
    error says it already)."""
    from stepc.torch.hf_causal_lm import whole_model_hint
    hint = whole_model_hint(module) if module is not None else ""
    return f"\n({hint})" if hint and "--layers" not in str(error) else ""


def _on_cpu(prog, build, seed: int, verify: bool, real_values: bool, debug: bool):
    """The program verified on a CPU copy of its module with seeded weights (`build(seed)`),
    or marked unverified, saying why (--no-verify, a module too large to run); with
    `real_values`, also that copy's seeded inputs and their traces. A warning says when
    verification was wanted and could not run."""
    from stepc.torch.capture import quiet
    from stepc.torch.verify import too_large
    reason = too_large(prog.module) if verify else "--no-verify"
    if reason and not real_values:
        prog = prog.unverified(reason)
    else:
        with quiet(debug):
            module = build(seed)
        prog = prog.on_module(module)
        prog = prog.unverified(reason) if reason else prog.verify(seed)
    if verify and not prog.verification.verified:
        click.echo(f"stepc: warning: {prog.verification.summary}", err=True)
    if not real_values:
        return prog, None, None
    real = prog.seeded_inputs(prog.example, seed)
    return prog, real, prog.traces(*real)


@click.command("from-torch", short_help="Lower a PyTorch module to a .step program.")
@click.argument("spec", metavar="FILE.py:NAME", required=False)
@click.option("--input", "inputs", multiple=True, metavar="NAME=DTYPE[SHAPE]",
              help="A forward argument, in order (repeatable), e.g. x=bf16[64,2048].")
@click.option("--layers", type=click.IntRange(min=1), default=None, metavar="N",
              help="Lower the first N decoder layers of the model --hf-config describes "
              "(its model_type names the transformers model), in decode. With "
              "--whole-model, or naming a causal LM class (transformers:LlamaForCausalLM), "
              "the whole model with its first N layers.")
@click.option("--whole-model", "whole", is_flag=True,
              help="Lower the whole causal LM --hf-config describes, in decode: the token "
              "embedding gathered by id, its decoder layers (all, or the first --layers N), "
              "the final norm and the LM head, to logits [B, vocab].")
@click.option("--batch", type=click.IntRange(min=1), default=None, metavar="B",
              help="With --layers or --whole-model: requests in the decode batch, one new "
              "token each [default: 64].")
@click.option("--past", type=click.IntRange(min=0), default=None, metavar="P",
              help="With --layers or --whole-model: cached positions per request, the KV "
              "cache's padded length [default: 1023].")
@click.option("--dtype", type=click.Choice(["f32", "bf16"]), default=None,
              help="With --layers or --whole-model: the model's dtype [default: f32].")
@click.option("--hf-config", default=None, metavar="CONFIG.json",
              help="Build NAME from this transformers config (a model's config.json): "
              "passed as `config`, its fields fill other required arguments.")
@click.option("--schedule", "tiling", default=None,
              type=click.Choice(["static", "dynamic", "timemux", "interleaved", "coarse"]),
              help="Tiling: static tiles, dynamic tiling or time-multiplexed regions for MoE "
              "blocks; interleaved, coarse or dynamic parallelisation for decode attention. "
              "Default: the block's first (static; interleaved).")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE",
              help="A schedule parameter (repeatable), e.g. TILE_F=64, TILE_N=16, R=32.")
@click.option("-o", "--output", "out", default=None, metavar="FILE.step",
              help="Write the program here (default: standard output).")
@click.option("--weights-out", default=None, metavar="FILE.safetensors",
              help="Also write the module's weights (built on the CPU with --seed) and seeded "
              "example inputs, for `stepc sim --weights FILE`.")
@click.option("--external-out", "externals_out", multiple=True, metavar="NAME=FILE.npy",
              help="Also write the external stream NAME (a MoE block's `routing`, decode "
              "attention's `kv_lens`) for the same inputs, for `stepc sim --trace NAME=FILE`.")
@click.option("--seed", default=0, show_default=True, type=int,
              help="Seed of the weights and example inputs the program is verified on, and "
              "of --weights-out / --external-out.")
@click.option("--no-verify", "no_verify", is_flag=True,
              help="Do not check the program against the module (by default the module runs "
              "on the CPU on inputs seeded by --seed and the program's functional simulation "
              "must equal its forward).")
@click.option("--force", is_flag=True, help="Overwrite existing output files.")
@quick_exit
def from_torch_cmd(spec, inputs, layers, whole, batch, past, dtype, hf_config, tiling, params,
                   out, weights_out, externals_out, seed, no_verify, force):
    """Lower a PyTorch module to a readable, tiled .step program. NAME is a module class or
    a factory function returning a module, in FILE.py or an importable package
    (transformers:LlamaMLP); it is built on the meta device (no weights allocated), with
    its default arguments or from --hf-config.

    \b
    Examples:
      stepc from-torch examples/torch/qwen_moe.py:MoEBlock --input x=bf16[64,2048] \\
          --schedule dynamic -o moe_from_torch.step
      stepc from-torch examples/torch/swiglu_mlp.py:SwiGLUMLP --input x=f32[64,256] \\
          --param TB=16 --param TILE_F=64
      stepc from-torch examples/torch/decode_attention.py:DecodeAttention \\
          --input q=bf16[8,4,16] --input k_new=bf16[8,16] --input v_new=bf16[8,16] \\
          --input k_cache=bf16[8,64,16] --input v_cache=bf16[8,64,16] \\
          --input kv_lens=i64[8] --schedule dynamic --param R=2 --param TILE_N=8 \\
          -o attn.step --weights-out attn.safetensors --external-out kv_lens=lens.npy
      stepc sim attn.step --weights attn.safetensors --trace kv_lens=lens.npy
      stepc from-torch transformers:LlamaMLP --hf-config config.json \\
          --input x=bf16[2,32,4096] -o mlp.step
      stepc from-torch --hf-config qwen3_moe.json --layers 2 --schedule dynamic \\
          -o qwen2l.step
      stepc from-torch --hf-config llama.json --whole-model --layers 2 --batch 8 \\
          -o llama2l.step
      stepc sim qwen2l.step --timing-only --trace kv_lens=lens.npy \\
          --trace routing_0=ids0.npz --trace routing_1=ids1.npz
    """
    _layer_settings(spec, inputs, hf_config, layers, batch, past, dtype, whole)
    args = [_parse_input(t) for t in inputs]
    schedule = {**({"tiling": tiling} if tiling else {}), **dict(_parse_param(p) for p in params)}
    streams = dict(_parse_external(t) for t in externals_out)
    if weights_out and not weights_out.endswith(".safetensors"):
        raise click.UsageError(f"--weights-out {weights_out}: expected a .safetensors file")
    for flag, path in ([("-o", out)] if out else []) + ([("--weights-out", weights_out)]
                                                        if weights_out else []) + [
            ("--external-out", p) for p in streams.values()]:
        check_new_output(flag, path, force)
    try:
        import torch

        from stepc.torch import InputRefused, LoweringError, VerificationError, from_torch
        from stepc.torch.build import (
            BuildError,
            build_module,
            load_hf_config,
            load_target,
            seed_transformers_weights,
        )
        from stepc.torch.capture import quiet
    except ImportError:
        click.echo("stepc: error: `from-torch` needs PyTorch: pip install 'stepc[torch]' (the "
                   "CPU wheel: --extra-index-url https://download.pytorch.org/whl/cpu)", err=True)
        sys.exit(EXIT_USAGE)
    debug = bool(click.get_current_context().find_root().params.get("debug"))
    real_values = bool(weights_out or streams)
    module = None
    try:
        target = load_target(spec) if spec else None
        whole_class = _whole_model_class(target) if target is not None and not inputs \
            else None
        if target is not None and not inputs and whole_class is None:
            _no_inputs(spec, target, layers, whole, batch, past, dtype)
        if whole_class is not None and not hf_config:
            raise click.UsageError(f"{spec} is a whole causal LM: give its --hf-config "
                                   "CONFIG.json (it is lowered in decode, with --batch, --past "
                                   "and optionally --layers N), or its forward arguments")
        if whole or whole_class is not None:
            prog, build = _lower_whole(hf_config, layers, batch, past, dtype, schedule, debug,
                                       whole_class)
        elif layers is not None:
            prog, build = _lower_layers(hf_config, layers, batch, past, dtype, schedule, debug)
        else:
            config = load_hf_config(hf_config, target) if hf_config else None
            with torch.device("meta"), quiet(debug):
                module = build_module(target, config)
                example = _examples(torch, args)
            prog = from_torch(module, example, schedule=schedule, debug=debug, verify=False)

            def build(seed):
                torch.manual_seed(seed)
                cpu_module = build_module(target, config)  # the same module, real weights
                seed_transformers_weights(cpu_module, config)
                return cpu_module
        prog, real, traces = _on_cpu(prog, build, seed, not no_verify, real_values, debug)
    except (BuildError, InputRefused) as e:
        click.echo(f"stepc: error: {e}{_hint(module, e)}", err=True)
        sys.exit(EXIT_USAGE)
    except LoweringError as e:
        written = "; nothing was written" if isinstance(e, VerificationError) else ""
        click.echo(f"stepc: error: {e}{written}{_hint(module, e)}", err=True)
        sys.exit(EXIT_PROGRAM)
    unknown = sorted(set(streams) - set(traces)) if streams else []
    if unknown:
        have = ", ".join(sorted(traces)) or "none"
        click.echo(f"stepc: error: --external-out {unknown[0]}: the program has no external "
                   f"stream `{unknown[0]}` from the module (it has: {have})", err=True)
        sys.exit(EXIT_USAGE)
    if out:
        with open(out, "w") as f:
            f.write(prog.text)
        click.echo(f"wrote {out}", err=True)
    else:
        click.echo(prog.text, nl=False)
    if weights_out:
        prog.save_weights(weights_out, *real)
        click.echo(f"wrote {weights_out}", err=True)
    import numpy as np
    for name, path in streams.items():
        np.save(path, traces[name])
        click.echo(f"wrote {path}", err=True)
    sys.exit(EXIT_OK)
