"""Writing a `.step` program the way the bundled programs read: a header comment, params with
comments, tensor declarations, then statements with their shapes as aligned comments."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from stepc.grammar.format import format_source

COMMENT_COL = 59  # the bundled programs align statement comments here


@dataclass
class StepWriter:
    """Accumulates the sections of one program and renders them."""

    header: list[str] = field(default_factory=list)
    params: list[tuple[str, str, str]] = field(default_factory=list)
    tensors: list[tuple[str, str, str]] = field(default_factory=list)
    body: list[tuple[str, str]] = field(default_factory=list)
    taken: set[str] = field(default_factory=set)

    def name(self, base: str) -> str:
        """A fresh identifier close to `base` (a module path or aten node name)."""
        s = re.sub(r"\W", "_", base).strip("_") or "v"
        s = s if not s[0].isdigit() else f"v{s}"
        out, i = s, 1
        while out in self.taken:
            i += 1
            out = f"{s}_{i}"
        self.taken.add(out)
        return out

    def param(self, name: str, value: int | str, comment: str = "") -> None:
        self.taken.add(name)
        self.params.append((name, str(value), comment))

    def tensor(self, name: str, decl: str, comment: str = "") -> None:
        self.tensors.append((name, decl, comment))

    def stmt(self, code: str, comment: str = "") -> None:
        self.body.append((code, comment))

    def blank(self, comment: str = "") -> None:
        """An empty line, or a comment line of its own (`# ...`)."""
        self.body.append(("", comment))

    def graph(self, text: str) -> None:
        """Statements written as program text, one per line, each with its `# comment`."""
        for line in text.strip("\n").split("\n"):
            code, _, comment = line.partition(" #")
            if code.strip():
                self.stmt(code.rstrip(), comment.strip())
            else:
                self.blank(comment.strip().lstrip("# ") if comment else "")

    def render(self, formatted: bool = True) -> str:
        """The program in `stepc fmt`'s layout (or as written, when its statements are laid
        out already: a program composed of rendered ones)."""
        return format_source(self._text(), "emitted.step") if formatted else self._text()

    def _text(self) -> str:
        lines = [f"# {h}".rstrip() for h in self.header] + [""]
        lines += self._aligned([(f"param {n} = {v}", c) for n, v, c in self.params], 21)
        lines.append("")
        width = max((len(n) for n, _, _ in self.tensors), default=0)
        lines += self._aligned([(f"tensor {n.ljust(width)} : {d}", c)
                                for n, d, c in self.tensors], 0)
        lines.append("")
        for code, comment in self.body:
            if not code:
                lines.append(f"# {comment}".rstrip() if comment else "")
            else:
                lines += self._aligned([(code, comment)], COMMENT_COL)
        return "\n".join(lines).rstrip() + "\n"

    @staticmethod
    def _aligned(rows: list[tuple[str, str]], col: int) -> list[str]:
        width = max([col - 1] + [len(c) for c, m in rows if m and len(c) < col + 20])
        out = []
        for code, comment in rows:
            if not comment:
                out.append(code)
            elif len(code) <= width:
                out.append(f"{code.ljust(width)} # {comment}")
            else:
                out.append(f"{code}  # {comment}")
        return out
