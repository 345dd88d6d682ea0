"""Checks of the API's arguments: a value of the wrong kind is an `InputError` naming the
argument, never a bare TypeError or ValueError from deep inside."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from stepc.api.errors import InputError


def kind(value: Any) -> str:
    """How an error names what it was given: `an int (5)`, `a list`."""
    name = type(value).__name__
    article = "an" if name[0] in "aeiou" else "a"
    shown = repr(value)
    return f"{article} {name}" + (f" ({shown})" if len(shown) <= 40 else "")


def path_arg(arg: str, value: Any) -> str:
    """A file path given as str or os.PathLike."""
    if isinstance(value, (str, os.PathLike)) and not isinstance(value, bytes):
        path = os.fspath(value)
        if isinstance(path, str) and path:
            return path
    raise InputError(f"{arg}: expected a file path (str or os.PathLike), found {kind(value)}")


def paths_arg(arg: str, value: Any) -> list[str]:
    """One path or a non-empty sequence of them."""
    if isinstance(value, (str, os.PathLike)):
        return [path_arg(arg, value)]
    if not isinstance(value, Sequence) or not value:
        raise InputError(f"{arg}: expected a path or a non-empty list of paths, found "
                         f"{kind(value)}")
    return [path_arg(arg, v) for v in value]


def int_arg(arg: str, value: Any, minimum: int | None = None,
            maximum: int | None = None) -> int:
    """An integer (not a bool, not a float), in `minimum`..`maximum`."""
    if isinstance(value, bool) or not isinstance(value, int):
        if hasattr(value, "__index__") and not isinstance(value, bool):
            value = value.__index__()  # numpy integers
        else:
            raise InputError(f"{arg}: expected an integer, found {kind(value)}")
    if minimum is not None and value < minimum:
        raise InputError(f"{arg}: expected an integer >= {minimum}, found {value}")
    if maximum is not None and value > maximum:
        raise InputError(f"{arg}: expected an integer <= {maximum:,}, found {value:,}")
    return int(value)


def bool_arg(arg: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{arg}: expected True or False, found {kind(value)}")
    return value


def text_arg(arg: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InputError(f"{arg}: expected a str, found {kind(value)}")
    return value


def mapping_arg(arg: str, value: Any, what: str) -> Mapping:
    """A mapping (None: empty) whose keys are str."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError(f"{arg}: expected a mapping of {what}, found {kind(value)}")
    for key in value:
        if not isinstance(key, str):
            raise InputError(f"{arg}: expected a mapping of {what}, found the key {key!r}")
    return value


def int_values_arg(arg: str, name: str, value: Any) -> list[int]:
    """A grid's values of one param: an int or a non-empty sequence of ints."""
    values = [value] if not isinstance(value, (Sequence, set, frozenset)) or \
        isinstance(value, str) else list(value)
    if isinstance(value, str):
        raise InputError(f"{arg}[{name!r}]: expected integers (a list like [16, 32]), found "
                         f"{kind(value)}")
    if not values:
        raise InputError(f"{arg}[{name!r}]: no values")
    return [int_arg(f"{arg}[{name!r}]", v) for v in values]


def choice_arg(arg: str, value: Any, choices: Sequence[str]) -> str:
    if value not in choices:
        raise InputError(f"{arg}: expected one of {', '.join(map(repr, choices))}, found "
                         f"{value!r}")
    return value


def callback_arg(arg: str, value: Any) -> Any:
    """None, a tqdm-like object (with `update`) or a function."""
    if value is not None and not hasattr(value, "update") and not callable(value):
        raise InputError(f"{arg}: expected a tqdm-like object (with `update`) or a "
                         f"function, found {kind(value)}")
    return value
