"""The one rule for output paths (`-o`, `--out`, `--trace-out`), checked before any work.

An output file goes in a directory that exists and can be written; an output directory
(`sim --out DIR`, `tune --out DIR`, `reproduce --out DIR`) either exists or is created, but
only it: the directory it goes in must exist. A missing parent, a read-only one, a parent
that is a file, or a path that is the wrong kind (a directory where a file is written, a
file where a directory is) is refused, so a typo never scatters new directories."""

from __future__ import annotations

import os


class OutputPathError(Exception):
    """An output path that cannot be written; the message names the flag and the path."""


def check_output_path(flag: str, path: str, directory: bool = False) -> None:
    """Raise OutputPathError now if `path` (a file, or with `directory` a directory that
    may not exist yet) cannot be written under the rule above."""
    if not path:
        raise OutputPathError(f"{flag}: empty path")
    if "\0" in path:
        raise OutputPathError(f"{flag} {path!r}: a path cannot contain NUL")
    exists = os.path.lexists(path)
    if directory:
        if exists and not os.path.isdir(path):
            raise OutputPathError(f"{flag} {path}: exists and is not a directory")
        if exists:
            writable(flag, path, path)
            return
    elif os.path.isdir(path):
        raise OutputPathError(f"{flag} {path}: is a directory; give a file name")
    parent = os.path.dirname(os.path.normpath(path)) or "."
    if not os.path.isdir(parent):
        above = parent
        while above and not os.path.lexists(above):
            above = os.path.dirname(above)
        if above and not os.path.isdir(above):
            raise OutputPathError(f"{flag} {path}: {above} is a file, not a directory")
        raise OutputPathError(f"{flag} {path}: directory {parent} does not exist (stepc "
                              "creates no missing directories: make it first)")
    writable(flag, path, parent)


def writable(flag: str, path: str, directory: str) -> None:
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OutputPathError(f"{flag} {path}: cannot write in {directory} (permission "
                              "denied)")
