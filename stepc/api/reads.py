"""What a checked program reads besides its source files: the data files its tensors and
external streams name (`file(path=...)` sources, `external(..., file=...)` defaults), for
front ends that must keep a program inside a directory."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stepc.api.program import CheckReport


def data_files(report: CheckReport) -> list[str]:
    """The paths of the data files the program names, as the simulator opens them."""
    from stepc.ops import OPS
    typed = report.compiled.typed
    if typed is None:
        return []
    paths = [dict(t.source.kwargs)["path"] for t in typed.program.tensors.values()
             if t.source is not None and t.source.name == "file"]
    paths += [n.attrs["gen"]["file"] for n in typed.program.nodes.values()
              if OPS[n.op].external and isinstance(n.attrs.get("gen", {}).get("file"), str)]
    return [p for p in paths if isinstance(p, str)]
