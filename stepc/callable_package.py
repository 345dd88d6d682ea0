"""Packages that are also functions of the `stepc` namespace: `stepc.check(path)` and
`stepc.sweep(programs, ...)` call the API while `stepc.check.checker` and
`stepc.sweep.runner` stay importable. Importing a subpackage binds it as an attribute of
`stepc`, so the package itself must be the callable, or the function would be replaced."""

from __future__ import annotations

import functools
import importlib
import sys
import types


class CallablePackage(types.ModuleType):
    """A package whose call is the API function `_api` names (`module:function`)."""

    _api: str

    def __call__(self, *args, **kwargs):
        return self._function()(*args, **kwargs)

    def _function(self):
        module, name = self._api.split(":")
        return getattr(importlib.import_module(module), name)

    @functools.cached_property
    def __signature__(self):
        import inspect
        return inspect.signature(self._function())


def make_callable(package: str, api: str) -> None:
    """Make the package named `package` call `api` (`module:function`) when called."""
    module = sys.modules[package]
    module.__class__ = CallablePackage
    module._api = api
