"""The workspace an MCP client may touch: programs and traces are read from text it passes
or from files under the root (symlinks resolved first), and nothing is written anywhere."""

from __future__ import annotations

import os
from pathlib import Path

MAX_FILE_BYTES = 16 * 2**20  # far beyond any program or trace an agent passes by name


class Refused(Exception):
    """A request the server will not carry out (outside the workspace, too large, bad
    arguments): reported to the client as a tool error with this message."""


class Workspace:
    """The root directory the server answers for."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise Refused(f"workspace {root}: not a directory")

    def resolve(self, path: str, what: str = "path") -> Path:
        """`path` (relative to the root, or absolute) as a real path inside the root."""
        if not isinstance(path, str) or not path or "\0" in path:
            raise Refused(f"{what}: expected a file path inside the workspace")
        real = (self.root / os.path.expanduser(path)).resolve()
        if not real.is_relative_to(self.root):
            raise Refused(f"{what} {path!r} is outside the workspace {self.root}; the server "
                          "reads only files under it (pass the program text instead)")
        return real

    def file(self, path: str, what: str = "path") -> Path:
        """A regular, readable file inside the root, of a sensible size."""
        real = self.resolve(path, what)
        if not real.exists():
            raise Refused(f"{what} {path!r}: no such file in the workspace")
        if not real.is_file():
            raise Refused(f"{what} {path!r}: not a regular file")
        if real.stat().st_size > MAX_FILE_BYTES:
            raise Refused(f"{what} {path!r}: larger than {MAX_FILE_BYTES:,} bytes")
        return real

    def relative(self, real: Path) -> str:
        """How results name a file of the workspace."""
        return str(real.relative_to(self.root))

    def contains(self, name: str) -> bool:
        """Whether a source the compiler read (`name`, relative to the root or absolute)
        lies inside the root; pseudo-files such as `<text>` do."""
        if name.startswith("<"):
            return True
        return (self.root / name).resolve().is_relative_to(self.root)
