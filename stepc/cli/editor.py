"""The `stepc fmt` and `stepc lsp` commands (registered by stepc.cli).

`fmt` exits 0 when every file is formatted (or, with --check, already was), 1 when a file
would change under --check or could not be formatted (a syntax error: the file is left as
it is), and 2 on usage errors (a path that does not exist, a file it cannot write, one
that is not a regular file or is too large: stepc.source.read_source_bytes).
"""

from __future__ import annotations

import difflib
import os
import sys

import click

from stepc.cli.common import EXIT_INTERNAL, EXIT_OK, EXIT_PROGRAM, EXIT_USAGE, quick_exit
from stepc.diagnostics import StepError, render_text
from stepc.source import read_source_bytes


def _targets(paths: tuple[str, ...]) -> list[str]:
    """The files to format: each path given, and the .step files under each directory."""
    files: list[str] = []
    for path in paths:
        if path == "-":
            files.append(path)
        elif os.path.isdir(path):
            found = len(files)
            for root, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                files += [os.path.join(root, n) for n in sorted(names) if n.endswith(".step")]
            if len(files) == found:
                click.echo(f"stepc: warning: {path} holds no .step file: nothing to format",
                           err=True)
        elif os.path.exists(path):
            files.append(path)
        else:
            raise click.UsageError(f"{path}: no such file or directory")
    return files


def _write_in_place(path: str, old: bytes, new: bytes) -> None:
    """Overwrite `path` with `new` through its own inode, so its owner, permissions and
    hard links stay as they are; if the write fails, the old bytes are put back."""
    with open(path, "r+b") as f:
        try:
            _rewrite(f, new)
        except OSError:
            _rewrite(f, old)
            raise


def _rewrite(f, data: bytes) -> None:
    f.seek(0)
    f.write(data)
    f.truncate()
    f.flush()
    os.fsync(f.fileno())


def _format_one(path: str, data: bytes) -> tuple[str, str] | None:
    """(old text, new text) of one file, or None after reporting why it cannot be
    formatted."""
    from stepc.app.editor import format_bytes  # the parser, loaded on first use

    name = "<stdin>" if path == "-" else path
    try:
        return format_bytes(name, data)
    except StepError as e:
        click.echo(render_text(e.diagnostics, e.sources), err=True, nl=False)
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
    from stepc.app.editor import FormatError

    files = _targets(paths or ("-",))
    changed: list[str] = []
    failed = False
    for path in files:
        try:
            writing = not (check or show_diff)
            data = _read(path, writing)
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
                _write_in_place(path, old.encode("utf-8"), new.encode("utf-8"))
            except OSError as e:
                click.echo(f"stepc: error: cannot write {path}: {e.strerror or e}", err=True)
                sys.exit(EXIT_USAGE)
            click.echo(f"formatted {path}", err=True)
    if check and changed:
        n = len(changed)
        click.echo(f"{n} file{'s' if n != 1 else ''} would be reformatted", err=True)
    sys.exit(EXIT_PROGRAM if failed or (check and changed) else EXIT_OK)


def _read(path: str, writing: bool) -> bytes:
    """A program file's bytes (`read_source_bytes`: a regular file, not too large),
    refused (usage error) when it cannot be read or is read-only when it is to be
    rewritten."""
    try:
        data = read_source_bytes(path)
        if writing and path != "-" and (not os.stat(path).st_mode & 0o222
                                        or not os.access(path, os.W_OK)):
            raise click.UsageError(f"{path}: the file is read-only, so it is not formatted "
                                   "(--diff shows the changes)")
    except OSError as e:
        raise click.UsageError(str(e)) from None
    return data


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
