"""Type and shape checking of elaborated programs.

The package is callable: `stepc.check(path, **params)` is `stepc.api.program.check`."""

from stepc.callable_package import make_callable

make_callable(__name__, "stepc.api.program:check")
