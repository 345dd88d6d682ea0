"""Where a search's work runs: a process pool that compiles each candidate once.

The searching process parses the programs first; `CandidatePool` then forks its workers,
which start with the modules, the parsed programs and sympy's cache already loaded. A worker
keeps the candidates it compiled (`keep_compiled`), and the pool sends a candidate's
simulations to the idle worker that compiled it for the analysis stage, else to any idle
worker (which compiles it again: a core never waits for another's cache). Where the
platform cannot fork, or another executor is given (Dask), every task compiles its own.
"""

from __future__ import annotations

import gc
import multiprocessing
import threading
from collections import deque
from concurrent.futures import Future

from stepc.explore.runner import LocalPool, Point, keep_compiled

GATHER_SECONDS = 0.02  # a batch's submissions arrive within this time of the first
KEEP = 8  # candidates a worker keeps compiled (and analysed) for their simulations


def remember(job_key: tuple | None, result, analysis, hw_digests: tuple[str, ...]) -> None:
    """Keep a candidate compiled and analysed by the analysis stage for its simulations in
    this worker, the analysis for each hardware configuration (`hw_digest`) given."""
    if job_key is not None:
        keep_compiled(*job_key, result, {d: analysis for d in hw_digests}, KEEP)


def _start() -> None:
    """A forked worker: what it inherited is never garbage, and its collector runs rarely
    (its heap of compiled programs is live until it ends)."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def can_fork() -> bool:
    """Whether this platform starts processes by forking (CandidatePool needs it)."""
    return "fork" in multiprocessing.get_all_start_methods()


def task_key(args: tuple) -> tuple | None:
    """The candidate a task compiles: (program digest, program, params), or None."""
    first = args[0] if args else None
    if isinstance(first, Point):
        return (dict(first.digests).get("program"), first.program, first.params)
    return getattr(first, "key", None)


class CandidatePool(LocalPool):
    """Forked single-process workers, each task sent to the idle worker that compiled its
    candidate if there is one (see the module doc)."""

    def __init__(self, jobs: int):
        ctx = multiprocessing.get_context("fork")
        self._workers = [ctx.Pool(1, initializer=_start) for _ in range(max(1, jobs))]
        self._busy = [False] * len(self._workers)
        self._held: list[set] = [set() for _ in self._workers]
        self._queue: deque = deque()
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._shared: dict = {}

    def _enqueue(self, fn, args: tuple, fut: Future, rank: int) -> None:
        """Queue a task; tune's tasks share one rank, placed by candidate (see `_dispatch`)."""
        with self._lock:
            self._queue.append((fn, args, fut, task_key(args)))
            if self._timer is None:  # tasks submitted together are placed together
                self._timer = threading.Timer(GATHER_SECONDS, self._gathered)
                self._timer.daemon = True
                self._timer.start()

    def _gathered(self) -> None:
        with self._lock:
            self._timer = None
            self._dispatch()

    def _dispatch(self) -> None:
        """Start queued tasks while a worker is idle (holding the lock): on an idle worker
        the oldest task of a candidate it compiled, else the oldest that no worker did,
        else the oldest."""
        while self._queue:
            idle = [i for i, busy in enumerate(self._busy) if not busy]
            if not idle:
                return
            w, i = self._pick(idle)
            fn, args, fut, key = self._queue[i]
            del self._queue[i]
            self._busy[w] = True
            if key is not None:
                self._held[w].add(key)
            self._workers[w].apply_async(
                fn, args, callback=lambda r, w=w, fut=fut: self._done(w, fut, r, None),
                error_callback=lambda e, w=w, fut=fut: self._done(w, fut, None, e))

    def _pick(self, idle: list[int]) -> tuple[int, int]:
        """(worker, queue index) of the next task to start."""
        keys = [task[3] for task in self._queue]
        for w in idle:
            i = next((i for i, k in enumerate(keys) if k is not None and k in self._held[w]),
                     None)
            if i is not None:
                return w, i
        return idle[0], next((i for i, k in enumerate(keys)
                              if not any(k in held for held in self._held)), 0)

    def _done(self, w: int, fut: Future, result, error) -> None:
        with self._lock:
            self._busy[w] = False
            self._dispatch()
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)

    def terminate(self) -> None:
        self.stopped = True
        if self._timer is not None:
            self._timer.cancel()
        for p in self._workers:
            p.terminate()

    def shutdown(self, wait: bool = True) -> None:
        for p in self._workers:
            p.close()
        if wait:
            for p in self._workers:
                p.join()
