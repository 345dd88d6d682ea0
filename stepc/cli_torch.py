"""`stepc from-torch`: lower a PyTorch module to a `.step` program (needs the torch extra;
torch is imported only when the command runs)."""

from __future__ import annotations

import os
import re
import sys

import click

from stepc.cli import EXIT_OK, EXIT_PROGRAM, EXIT_USAGE, check_output_path, quick_exit

_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}
_INPUT = re.compile(r"^(\w+)=(\w+)\[(\d+(?:\s*,\s*\d+)*)\]$")


def _parse_input(text: str) -> tuple[str, str, list[int]]:
    m = _INPUT.match(text.replace(" ", ""))
    if not m or m.group(2) not in _DTYPES:
        raise click.UsageError(f"--input {text}: expected NAME=DTYPE[D0,D1,...] with DTYPE one "
                               f"of {', '.join(_DTYPES)}, e.g. x=bf16[64,2048]")
    return m.group(1), m.group(2), [int(d) for d in m.group(3).split(",")]


def _parse_param(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier() or not value.lstrip("-").isdigit():
        raise click.UsageError(f"--param {text}: expected NAME=INTEGER, e.g. TILE_F=64")
    return name, int(value)


@click.command("from-torch", short_help="Lower a PyTorch module to a .step program.")
@click.argument("spec", metavar="FILE.py:CLASS")
@click.option("--input", "inputs", multiple=True, required=True, metavar="NAME=DTYPE[SHAPE]",
              help="A forward argument, in order (repeatable), e.g. x=bf16[64,2048].")
@click.option("--schedule", "tiling", default="static",
              type=click.Choice(["static", "dynamic", "timemux"]),
              help="Tiling: static tiles, dynamic tiling or time-multiplexed regions (the last "
              "two for MoE blocks).")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE",
              help="A schedule parameter (repeatable), e.g. TILE_F=64, TILE_N=16, R=32.")
@click.option("-o", "--output", "out", default=None, metavar="FILE.step",
              help="Write the program here (default: standard output).")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@quick_exit
def from_torch_cmd(spec, inputs, tiling, params, out, force):
    """Lower the module class FILE.py:CLASS (built with its default arguments, on the meta
    device, so no weights are allocated) to a readable, tiled .step program.

    \b
    Examples:
      stepc from-torch examples/torch/qwen_moe.py:MoEBlock --input x=bf16[64,2048] \\
          --schedule dynamic -o moe_from_torch.step
      stepc from-torch examples/torch/swiglu_mlp.py:SwiGLUMLP --input x=f32[64,256] \\
          --param TB=16 --param TILE_F=64
    """
    args = [_parse_input(t) for t in inputs]
    schedule = {"tiling": tiling, **dict(_parse_param(p) for p in params)}
    if out:
        check_output_path("-o", out)
        if os.path.exists(out) and not force:
            click.echo(f"stepc: error: {out} exists; --force overwrites it", err=True)
            sys.exit(EXIT_USAGE)
    try:
        import torch

        from stepc.torch import LoweringError, from_torch, load_module
    except ImportError:
        click.echo("stepc: error: `from-torch` needs PyTorch: pip install 'stepc[torch]' (the "
                   "CPU wheel: --extra-index-url https://download.pytorch.org/whl/cpu)", err=True)
        sys.exit(EXIT_USAGE)
    try:
        cls = load_module(spec)
        with torch.device("meta"):
            module = cls()
            example = tuple(torch.empty(shape, dtype=getattr(torch, _DTYPES[dt]))
                            for _, dt, shape in args)
        prog = from_torch(module, example, schedule=schedule)
    except LoweringError as e:
        click.echo(f"stepc: error: {e}", err=True)
        sys.exit(EXIT_PROGRAM)
    if out:
        with open(out, "w") as f:
            f.write(prog.text)
        click.echo(f"wrote {out}", err=True)
    else:
        click.echo(prog.text, nl=False)
    sys.exit(EXIT_OK)
