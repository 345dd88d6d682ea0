"""The worker process the server's program tools run in: one long-lived process, so the
checked programs it caches last between calls, with a memory limit (RLIMIT_AS, set in the
child) and a wall-time limit per call. A call that runs over its time is killed with its
worker; so is a worker that ran out of memory. The next call starts a fresh worker (with
an empty cache): isolation costs the cache only when a limit was hit."""

from __future__ import annotations

import functools
import multiprocessing
import os
import shutil
import signal
import sys
import threading
import time

from stepc.mcp.limits import MEMORY_LIMIT_MIB
from stepc.mcp.workspace import Refused

PROGRAM_TOOLS = ("check", "analyze", "simulate", "format", "tune", "estimate")  # Tools' methods
WORKER_TOOLS = (*PROGRAM_TOOLS, "task_check")


class ToolFailure(Exception):
    """A call that produced no result: its message goes to the client as a tool error."""


def _serve(conn, root: str, memory_bytes: int | None, scratch: str) -> None:
    """The worker's loop: (tool, args) in, ("ok", result) or ("error", message) out, or
    ("fatal", message) as it ends (out of memory: its heap is not to be trusted)."""
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stdout is the server's protocol pipe
    with open(os.devnull, "rb") as null:  # and so is stdin (the worker may start first)
        os.dup2(null.fileno(), sys.stdin.fileno())
    os.setpgid(0, 0)  # its own process group: stopping it stops the processes it starts (tune)
    if memory_bytes:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    os.chdir(root)
    from stepc.diagnostics import StepError
    from stepc.mcp.tasks import task_check
    from stepc.mcp.tools import Tools, failure_message
    from stepc.mcp.workspace import Workspace

    tools = Tools(Workspace(root), scratch)
    run = {**{tool: getattr(tools, tool) for tool in PROGRAM_TOOLS},
           "task_check": functools.partial(task_check, tools)}
    tools.warm()
    while True:
        try:
            name, args = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        try:
            if name not in run:
                raise Refused(f"the worker has no tool {name!r}")
            reply = ("ok", run[name](args))
        except (Refused, StepError) as e:
            reply = ("error", failure_message(e))
        except MemoryError:
            conn.send(("fatal", f"{name} ran out of the worker's memory limit "
                       f"({(memory_bytes or 0) // 2**20:,} MiB); the worker restarts"))
            return
        except RecursionError:
            reply = ("error", f"{name}: the program nests too deeply to handle")
        except Exception as e:  # noqa: BLE001 - a bug in stepc: reported, the worker lives
            reply = ("error", f"internal error in stepc ({type(e).__name__}: {e}); "
                     "this is a bug in stepc, please report it with the input")
        try:
            conn.send(reply)
        except (OSError, ValueError):
            return


class Worker:
    """The worker process seen from the server: `call` sends one request and waits for its
    answer, up to a time limit. Calls are serialised."""

    def __init__(self, root: str, memory_mib: int | None = MEMORY_LIMIT_MIB):
        self.root = root
        self.scratch = os.path.join(root, f".stepc-mcp-{os.getpid()}-{id(self):x}")
        self.memory_bytes = memory_mib * 2**20 if memory_mib else None
        self._lock = threading.Lock()  # one call at a time
        self._state = threading.Lock()  # guards the two below, read by `cancel`
        self._running: object = None  # the ticket of the call in the worker
        self._dropped: set = set()  # tickets cancelled before their call began
        self._process = None
        self._conn = None
        self.restarts = 0

    def start(self) -> None:
        context = multiprocessing.get_context("spawn")  # no copy of the server's threads
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, name="stepc-mcp-worker",
                                        args=(child, self.root, self.memory_bytes,
                                              self.scratch))
        self._process.start()
        child.close()

    def stop(self) -> None:
        """End the worker and every process it started."""
        if self._process is not None:
            try:
                os.killpg(self._process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):  # gone, or not yet its own group
                if self._process.is_alive():
                    self._process.kill()
            self._process.join(5)
            self._conn.close()
            shutil.rmtree(self.scratch, ignore_errors=True)  # what a stopped tune left
        self._process = self._conn = None

    def cancel(self, ticket: object) -> None:
        """Drop the call made with `ticket` (its client cancelled it): one still waiting
        for the worker will not run; one running is stopped with the worker (and the
        processes it started), and the next call starts a fresh worker."""
        with self._state:
            if self._running is not ticket:
                self._dropped.add(ticket)
                return
            process = self._process
        if process is not None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):  # gone, or not yet its own group
                process.kill()

    def call(self, name: str, args: dict, seconds: float, ticket: object = None) -> dict:
        """The result of tool `name`, or ToolFailure (its message, the time limit passed,
        the call was cancelled, or the worker died). `ticket` names the call to `cancel`."""
        with self._lock:
            with self._state:
                if ticket in self._dropped:
                    self._dropped.discard(ticket)
                    raise ToolFailure(f"{name} was cancelled before it started")
                self._running = ticket
            try:
                return self._call(name, args, seconds)
            finally:
                with self._state:
                    self._running = None

    def _call(self, name: str, args: dict, seconds: float) -> dict:
        if self._process is None or not self._process.is_alive():
            if self._process is not None:
                self.stop()
                self.restarts += 1
            self.start()
        started = time.monotonic()
        try:
            self._conn.send((name, args))
            if not self._conn.poll(seconds):
                self.stop()
                self.restarts += 1
                raise ToolFailure(
                    f"{name} ran past its time limit of {seconds:g} s and was stopped "
                    "(the worker restarts; programs it had checked are checked again)")
            status, value = self._conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            code = self._process.exitcode if self._process is not None else None
            self.stop()
            self.restarts += 1
            raise ToolFailure(f"{name} stopped the worker (exit code {code}) after "
                              f"{time.monotonic() - started:.1f} s; it restarts") from None
        if status == "fatal":  # the worker is ending: wait for it
            self.stop()
            self.restarts += 1
        if status != "ok":
            raise ToolFailure(value)
        return value
