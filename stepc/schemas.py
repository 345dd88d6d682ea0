"""The JSON documents stepc writes form one family: each names its shape and version in
a `schema` key, `"stepc-<command>/<N>"`, N growing whenever the shape changes. Across the
family a location is `{"file", "line", "column", "end_line", "end_column"}` (1-based), a
symbolic expression is a string in stepc's own spelling (`ceil(D_0/4)`,
`(11264 if D_0 > 0 else 0)`), and a number that is an integer is a JSON integer.
docs/json.md describes every document.
"""

from __future__ import annotations

VERSIONS = {"check": 2, "analyze": 2, "sim": 3, "sweep": 3, "tune": 3, "fifo": 2,
            "tasks-list": 1, "tasks-check": 1}


def schema(command: str) -> str:
    """The `schema` value of `command`'s JSON document: `stepc-check/2`."""
    return f"stepc-{command}/{VERSIONS[command]}"
