"""The workspace an MCP client may touch: programs and traces are read from text it passes
or from files under the root (symlinks resolved first), and nothing is written anywhere."""

from __future__ import annotations

import os
from pathlib import Path

MAX_FILE_BYTES = 16 * 2**20  # far beyond any program or trace an agent passes by name
NAME_MAX = 255  # bytes in one component of a file name (Linux, macOS, Windows)


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
        if any(len(part.encode("utf-8", "surrogatepass")) > NAME_MAX
               for part in Path(path).parts):
            raise Refused(f"{what} {_short(path)}: a name in it is longer than {NAME_MAX} "
                          "bytes")
        try:
            real = (self.root / os.path.expanduser(path)).resolve()
        except (OSError, RuntimeError) as e:  # a name too long, a loop of links
            raise Refused(f"{what} {_short(path)}: {getattr(e, 'strerror', None) or e}"
                          ) from None
        if not real.is_relative_to(self.root):
            raise Refused(f"{what} {_short(path)} is outside the workspace {self.root}; the server "
                          "reads only files under it (pass the program text instead)")
        return real

    def file(self, path: str, what: str = "path") -> Path:
        """A regular, readable file inside the root, of a sensible size."""
        real = self.resolve(path, what)
        try:
            if not real.exists():
                raise Refused(f"{what} {_short(path)}: no such file in the workspace")
            if not real.is_file():
                raise Refused(f"{what} {_short(path)}: not a regular file")
            size = real.stat().st_size
        except OSError as e:  # a name too long, a loop of links, a directory not readable
            raise Refused(f"{what} {_short(path)}: {e.strerror or e}") from None
        if size > MAX_FILE_BYTES:
            raise Refused(f"{what} {_short(path)}: larger than {MAX_FILE_BYTES:,} bytes")
        return real

    def relative(self, real: Path) -> str:
        """How results name a file of the workspace."""
        return str(real.relative_to(self.root))

    def contains(self, name: str) -> bool:
        """Whether a source the compiler read (`name`, relative to the root or absolute)
        lies inside the root; pseudo-files such as `<text>` do."""
        if name.startswith("<"):
            return True
        try:
            return (self.root / name).resolve().is_relative_to(self.root)
        except (OSError, RuntimeError):
            return False


def _short(path: str, keep: int = 80) -> str:
    """A path as a message quotes it: repr'd, its middle cut when it is long."""
    text = repr(path)
    return text if len(text) <= keep else f"{text[:keep // 2]}...{text[-keep // 2:]}"
