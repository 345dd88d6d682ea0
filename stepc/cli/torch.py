"""`stepc from-torch`: lower a PyTorch module to a `.step` program (needs the torch extra;
torch is imported only when the command runs)."""

from __future__ import annotations

import re
import sys

import click

from stepc.app.torch import DTYPES
from stepc.cli.common import EXIT_OK, EXIT_PROGRAM, EXIT_USAGE, check_new_output, quick_exit

_INPUT = re.compile(r"^(\w+)=(\w+)\[(\d+(?:\s*,\s*\d+)*)\]$")


def _parse_input(text: str) -> tuple[str, str, list[int]]:
    m = _INPUT.match(text.replace(" ", ""))
    if not m or m.group(2) not in DTYPES:
        raise click.UsageError(f"--input {text}: expected NAME=DTYPE[D0,D1,...] with DTYPE one "
                               f"of {', '.join(DTYPES)}, e.g. x=bf16[64,2048]")
    dims = [int(d) for d in m.group(3).split(",")]
    if not all(0 < d < 2**63 for d in dims):
        raise click.UsageError(f"--input {text}: every dim must be a positive integer below "
                               "2^63")
    return m.group(1), m.group(2), dims


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
    from stepc.app import InputError
    from stepc.app.torch import LoweringFailed, ModuleRefused, TorchMissing, lower
    try:
        lowered = lower(spec, args, layers=layers, whole=whole, batch=batch, past=past,
                        dtype=dtype, hf_config=hf_config, schedule=schedule, seed=seed,
                        verify=not no_verify, real_values=bool(weights_out or streams),
                        debug=bool(click.get_current_context().find_root().params.get("debug")),
                        warn=lambda line: click.echo(line, err=True))
    except TorchMissing as e:
        click.echo(f"stepc: error: {e}", err=True)
        sys.exit(EXIT_USAGE)
    except InputError as e:
        raise click.UsageError(str(e)) from None
    except ModuleRefused as e:
        click.echo(f"stepc: error: {e}", err=True)
        sys.exit(EXIT_USAGE)
    except LoweringFailed as e:
        click.echo(f"stepc: error: {e}", err=True)
        sys.exit(EXIT_PROGRAM)
    traces = lowered.traces
    unknown = sorted(set(streams) - set(traces)) if streams else []
    if unknown:
        have = ", ".join(sorted(traces)) or "none"
        click.echo(f"stepc: error: --external-out {unknown[0]}: the program has no external "
                   f"stream `{unknown[0]}` from the module (it has: {have})", err=True)
        sys.exit(EXIT_USAGE)
    if out:
        with open(out, "w") as f:
            f.write(lowered.text)
        click.echo(f"wrote {out}", err=True)
    else:
        click.echo(lowered.text, nl=False)
    if weights_out:
        lowered.save_weights(weights_out)
        click.echo(f"wrote {weights_out}", err=True)
    import numpy as np
    for name, path in streams.items():
        np.save(path, traces[name])
        click.echo(f"wrote {path}", err=True)
    sys.exit(EXIT_OK)
