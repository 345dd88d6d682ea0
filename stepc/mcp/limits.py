"""The server's default limits (the command line's defaults too)."""

TIME_LIMIT = 120.0  # seconds a tool call may run by default, and at most
MEMORY_LIMIT_MIB = 8192  # address space of the worker (numpy and sympy reserve more than they use)
