"""Running a rewrite: walk the checked program, print the new one, check it again."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from stepc.rewrite.downtile import Downtile
from stepc.rewrite.draft import Change, Draft, RewriteError, declarations, render
from stepc.rewrite.walk import walk

REWRITES = {Downtile.name: Downtile}


@dataclass
class Rewritten:
    """A rewritten program: its text, the record of what changed, and its compilation
    (the front end's `Compiled`, checked again)."""

    rewrite: str
    text: str
    changes: list[Change]
    compiled: Any = field(repr=False)

    @property
    def rewritten(self) -> list[Change]:
        return [c for c in self.changes if c.action == "rewritten"]


def apply(name: str, compiled, options: dict[str, Any] | None = None,
          out_path: str | None = None) -> Rewritten:
    """Rewrite the checked program `compiled` (the front end's `Compiled`) with the rewrite
    `name` and its `options`; the result is compiled and checked again. `out_path`: where
    the text will be written (file sources are made relative to it)."""
    from stepc.frontend import compile_source
    from stepc.source import SourceFile
    if name not in REWRITES:
        raise RewriteError(f"no rewrite `{name}` (known: {', '.join(sorted(REWRITES))})")
    typed = compiled.typed
    out_dir = os.path.dirname(os.path.abspath(out_path)) if out_path else None
    draft = Draft(declarations(typed, out_dir), [], taken={t for t in typed.program.tensors})
    rw = REWRITES[name](typed, draft, **(options or {}))
    walk(rw)
    params = ", ".join(f"{k}={v}" for k, v in typed.program.params.items())
    header = [f"{os.path.basename(compiled.name)} rewritten by `stepc rewrite {name}`"
              + (f" ({params})" if params else "") + ".",
              "Each comment names the original operator a statement came from."]
    text = render(draft, header)
    where = os.path.normpath(out_path) if out_path else None
    again = compile_source(SourceFile(out_path or f"<{name}>", text), {}, where)
    if not again.ok:
        first = [d for d in again.diagnostics.sorted() if d.severity.value == "error"][0]
        raise RewriteError(f"the rewritten program does not check ({first.code} at line "
                           f"{first.span.line if first.span else '?'}: {first.message}); "
                           "this is a bug in the rewrite", "internal")
    return Rewritten(name, text, draft.changes, again)
