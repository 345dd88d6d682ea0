"""The `stepc fmt` and `stepc lsp` commands (registered by stepc.cli).

`fmt` exits 0 when every file is formatted (or, with --check, already was), 1 when a file
would change under --check or could not be formatted (a syntax error: the file is left as
it is), and 2 on usage errors (a path that does not exist, a file it cannot write).
"""

from __future__ import annotations

import difflib
import os
import sys
import tempfile

import click

from stepc.cli import EXIT_INTERNAL, EXIT_OK, EXIT_PROGRAM, EXIT_USAGE, quick_exit
from stepc.diagnostics import StepError, render_text
from stepc.source import SourceFile


def _targets(paths: tuple[str, ...]) -> list[str]:
    """The files to format: each path given, and the .step files under each directory."""
    files: list[str] = []
    for path in paths:
        if path == "-":
            files.append(path)
        elif os.path.isdir(path):
            for root, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                files += [os.path.join(root, n) for n in sorted(names) if n.endswith(".step")]
        elif os.path.exists(path):
            files.append(path)
        else:
            raise click.UsageError(f"{path}: no such file or directory")
    return files


def _write_atomic(path: str, data: bytes) -> None:
    """Replace `path` with `data` in one step (a temporary file renamed over it), keeping
    the file's permissions; the file is never left half written."""
    real = os.path.realpath(path)
    fd, tmp = tempfile.mkstemp(prefix=".stepc-fmt-", dir=os.path.dirname(real) or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, os.stat(real).st_mode & 0o7777)
        os.replace(tmp, real)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _format_one(path: str, data: bytes) -> tuple[str, str] | None:
    """(old text, new text) of one file, or None after reporting why it cannot be
    formatted."""
    from stepc.grammar.format import format_source  # the parser, loaded on first use
    from stepc.grammar.parse import decode_source

    name = "<stdin>" if path == "-" else path
    sources: dict[str, SourceFile] = {}
    try:
        sources[name] = decode_source(name, data)
        text = data.decode("utf-8")
        return text, format_source(text, name)
    except StepError as e:
        click.echo(render_text(e.diagnostics, sources), err=True, nl=False)
        click.echo(f"{name}: not formatted (fix the error above first)", err=True)
    return None


@click.command("fmt", short_help="Format .step files in canonical layout.")
@click.argument("paths", nargs=-1, type=str)
@click.option("--check", is_flag=True, help="Write nothing; list the files that would "
              "change and exit 1 if any would.")
@click.option("--diff", "show_diff", is_flag=True, help="Write nothing; print a unified "
              "diff of the changes.")
@quick_exit
def fmt_cmd(paths: tuple[str, ...], check: bool, show_diff: bool) -> None:
    """Format .step files in place (PATHS: files, directories of .step files, or - for
    standard input to standard output, the default when it is not a terminal). The layout
    is canonical and idempotent; comments, blank lines and line numbers are kept, and
    columns you aligned stay aligned. A file with a syntax error is reported and left as
    it is.

    \b
    Examples:
      stepc fmt programs/
      stepc fmt --check programs/moe_static.step
      stepc fmt --diff mine.step
      stepc fmt < mine.step > formatted.step
    """
    if not paths and sys.stdin.isatty():
        raise click.UsageError("give .step files or directories to format, or - to read "
                               "standard input")
    from stepc.grammar.format import FormatError

    files = _targets(paths or ("-",))
    changed: list[str] = []
    failed = False
    for path in files:
        try:
            data = sys.stdin.buffer.read() if path == "-" else _read(path)
            result = _format_one(path, data)
        except FormatError as e:
            click.echo(f"stepc: internal error: {e}", err=True)
            sys.exit(EXIT_INTERNAL)
        if result is None:
            failed = True
            continue
        old, new = result
        if path == "-" and not (check or show_diff):
            sys.stdout.buffer.write(new.encode("utf-8"))
            continue
        if old == new:
            continue
        changed.append(path)
        name = "<stdin>" if path == "-" else path
        if show_diff:
            click.echo("".join(difflib.unified_diff(
                old.splitlines(keepends=True), new.splitlines(keepends=True),
                f"{name} (original)", f"{name} (formatted)")), nl=False)
        elif check:
            click.echo(name)
        else:
            try:
                _write_atomic(path, new.encode("utf-8"))
            except OSError as e:
                click.echo(f"stepc: error: cannot write {path}: {e.strerror or e}", err=True)
                sys.exit(EXIT_USAGE)
            click.echo(f"formatted {path}", err=True)
    if check and changed:
        n = len(changed)
        click.echo(f"{n} file{'s' if n != 1 else ''} would be reformatted", err=True)
    sys.exit(EXIT_PROGRAM if failed or (check and changed) else EXIT_OK)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise click.UsageError(f"{path}: cannot read: {e.strerror or e}") from None


@click.command("lsp", short_help="Run the language server (for editors).")
@click.option("--stdio", is_flag=True, help="Talk over standard input and output (the "
              "default and only transport; accepted for editors that pass it).")
def lsp_cmd(stdio: bool) -> None:
    """Run the STeP language server over standard input and output, for editors:
    diagnostics as you type, hover with inferred shapes, go to definition, references,
    completion, signature help, outline, formatting and inlay hints. Needs the `lsp` extra:
    pip install 'stepc[lsp]'. docs/editor.md says how to set up VS Code, Neovim and Emacs.
    """
    try:
        import lsprotocol  # noqa: F401
        import pygls  # noqa: F401
    except ImportError:
        click.echo("stepc lsp needs pygls and lsprotocol: pip install 'stepc[lsp]'", err=True)
        sys.exit(EXIT_USAGE)
    from stepc.lsp.server import serve
    serve()
