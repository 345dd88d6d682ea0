"""How a `stepc` process ends: its exit codes, and the quick exit a command may ask for.
Kept apart from `common` so that the command group (and so `stepc --help`) loads only this.

Exit codes: 0 success (warnings allowed), 1 the program has errors, 2 usage error,
3 the simulation deadlocked, 70 internal error (a bug in stepc: please report it), 130
interrupted (Ctrl-C).
"""

from __future__ import annotations

import functools

EXIT_OK, EXIT_PROGRAM, EXIT_USAGE, EXIT_DEADLOCK, EXIT_INTERNAL = 0, 1, 2, 3, 70
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports a process ended by SIGINT


quick_exit_requested = False  # set by a command that may end the process without tearing it down


def quick_exit(command):
    """Mark a command that leaves no child processes or open resources behind: when it
    ends, the process exits at once, without freeing its heap object by object (sympy's
    caches, a simulation's arrays), which the operating system reclaims anyway."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        global quick_exit_requested
        quick_exit_requested = True
        return command(*args, **kwargs)
    return wrapper
