"""Tables a floor fills by decorating the code each entry names (`@behavior("Map")`,
`@memory_model("dram")`): a name registered twice is an error."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)


def registrar(table: dict[str, Callable], kind: str, role: str
              ) -> Callable[[str], Callable[[F], F]]:
    """The decorator factory of `table`: `register(name)(f)` enters `f` under `name`; a
    second entry for a name raises ValueError ("{kind} {name} already has {role} (...)")."""
    def register(name: str) -> Callable[[F], F]:
        def enter(f: F) -> F:
            if name in table:
                old = table[name]
                raise ValueError(f"{kind} {name} already has {role} "
                                 f"({old.__module__}.{old.__name__})")
            table[name] = f
            return f
        return enter
    return register
