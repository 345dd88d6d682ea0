"""`stepc rewrite`: a program rewritten into a new, checked `.step` program."""

from __future__ import annotations

import sys

import click

from stepc.cli.common import (
    DEFINE,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_PROGRAM,
    EXIT_USAGE,
    check_new_output,
    exit_on_errors,
    input_error,
    parse_defines,
    quick_exit,
)

_EXITS = {"usage": EXIT_USAGE, "program": EXIT_PROGRAM, "internal": EXIT_INTERNAL}


@click.command("rewrite", short_help="Rewrite a program (downtile: hierarchical tiling).")
@click.argument("name", metavar="NAME")
@click.argument("file", metavar="FILE.step")
@DEFINE
@click.option("-o", "--output", "out", default=None, metavar="OUT.step",
              help="Write the new program here (default: standard output).")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@click.option("--tile", default=None, metavar="ROWSxCOLS",
              help="downtile: the physical tile, e.g. 16x16 (default: --hw's "
              "fabric.stream_tile).")
@click.option("--hw", default=None, metavar="PRESET|FILE.toml",
              help="The hardware: its fabric.stream_tile is downtile's physical tile, and "
              "--verify simulates on it (default paper-eval).")
@click.option("--keep-memory-tiles", is_flag=True,
              help="downtile: off-chip loads keep their logical tiles; operators split "
              "them into sub-tiles on chip.")
@click.option("--verify", "verify", is_flag=True,
              help="Simulate both programs on the same random inputs and compare outputs; "
              "check the analysis deltas against the rewrite's rules (exit 1 if any fails).")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, 2**63 - 1),
              help="With --verify: the seed of the random inputs.")
@quick_exit
def rewrite_cmd(name, file, defines, out, force, tile, hw, keep_memory_tiles, verify, seed):
    """Rewrite FILE with the rewrite NAME and write the result as a formatted `.step`
    program, each statement with a comment naming the operator it came from; the result
    is checked again. A summary of what changed goes to standard error.

    \b
    Rewrites:
      downtile   split logical tiles into the fabric's physical tiles (the paper's
                 hierarchical tiling): matrix products become Bufferize -> Repeat ->
                 Streamify -> Map -> Accum over sub-tiles

    \b
    Examples:
      stepc rewrite downtile programs/swiglu.step --tile 16x16 -o swiglu_16.step
      stepc rewrite downtile programs/swiglu.step --hw hdl-like --verify -o s.step
    """
    from stepc.app import InputError
    from stepc.app.rewrite import REWRITES, RewriteError, rewrite_file
    if name not in REWRITES:
        raise click.UsageError(f"no rewrite `{name}` (known: {', '.join(sorted(REWRITES))})")
    if out:
        check_new_output("-o", out, force)
    try:
        done = rewrite_file(name, file, parse_defines(defines), tile=tile, hw=hw,
                            split_memory=not keep_memory_tiles, out_path=out, verify=verify,
                            seed=seed)
    except RewriteError as e:
        click.echo(f"stepc: error: {file}: {e}", err=True)
        sys.exit(_EXITS[e.kind])
    except InputError as e:
        input_error(e)
    exit_on_errors(done.checked)
    code = EXIT_OK
    if done.verdict is not None:
        for line in done.verification_lines():
            click.echo(line, err=True)
        for problem in done.verdict.problems:
            click.echo(f"stepc: error: {problem}", err=True)
        code = EXIT_OK if done.verdict.ok else EXIT_PROGRAM
    if out:
        with open(out, "w") as f:
            f.write(done.text)
    else:
        click.echo(done.text, nl=False)
    for line in done.summary_lines(out):
        click.echo(line, err=True)
    sys.exit(code)
