"""A local process pool with the Executor methods a sweep uses: its workers ignore Ctrl-C,
work waits in the pool's own queue, ranked, until a worker is free, and work submitted
again under the same `share` key runs once."""

from __future__ import annotations

import functools
import heapq
import itertools
import signal
import threading
from concurrent.futures import Future


def _start_worker() -> None:
    """Workers leave Ctrl-C to the main process, which stops them. They do not load numba
    up front: on the evaluation fabric (one request per message) every window is served in
    closed form, and a run that serves many requests singly (the validation fabric's
    four-request messages) loads it by itself (`ref.COMPILE_AFTER`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _copy_outcome(to: Future, done: Future) -> None:
    """Give `to` the result (or exception) of the finished `done`."""
    if done.exception() is None:
        to.set_result(done.result())
    else:
        to.set_exception(done.exception())


class LocalPool:
    """A local process pool with the Executor methods a sweep uses, whose workers ignore
    Ctrl-C and can all be ended at once (`terminate`). Work waits in the pool's own queue
    and goes to a worker only when one is free, lowest `rank` first (in submission order
    within a rank), so work submitted later with a lower rank overtakes what still waits.
    Work submitted with a `share` key that earlier work had gets that work's result (the
    figures of `stepc reproduce all` share some points); such a future has `shared` set."""

    def __init__(self, jobs: int):
        import multiprocessing
        self.jobs = max(1, jobs)
        self._pool = multiprocessing.Pool(self.jobs, initializer=_start_worker)
        self._waiting: list = []  # heap of (rank, order, fn, args, future)
        self._order = itertools.count()
        self._running = 0
        self._idle = threading.Condition()
        self._shared: dict = {}  # share key -> the future of the work that runs for it

    def submit(self, fn, *args, rank: int = 1, share=None) -> Future:
        fut: Future = Future()
        fut.set_running_or_notify_cancel()
        if share is not None:
            first = self._shared.setdefault(share, fut)
            if first is not fut:
                fut.shared = True  # the result is `first`'s: no work of its own
                first.add_done_callback(functools.partial(_copy_outcome, fut))
                return fut
        self._enqueue(fn, args, fut, rank)
        return fut

    def _enqueue(self, fn, args: tuple, fut: Future, rank: int) -> None:
        with self._idle:
            heapq.heappush(self._waiting, (rank, next(self._order), fn, args, fut))
            self._dispatch()

    def _dispatch(self) -> None:
        """Hand waiting work to free workers (the caller holds `_idle`)."""
        while self._running < self.jobs and self._waiting and not self.stopped:
            _, _, fn, args, fut = heapq.heappop(self._waiting)
            self._running += 1
            self._pool.apply_async(fn, args, callback=functools.partial(self._done, fut, True),
                                   error_callback=functools.partial(self._done, fut, False))

    def _done(self, fut: Future, ok: bool, value) -> None:
        with self._idle:
            self._running -= 1
            self._dispatch()
            self._idle.notify_all()
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)

    stopped = False

    def terminate(self) -> None:
        with self._idle:
            self.stopped = True
            self._waiting.clear()
        self._pool.terminate()

    def shutdown(self, wait: bool = True) -> None:
        """Close the pool; with `wait`, once all submitted work has run."""
        if wait:
            with self._idle:
                self._idle.wait_for(lambda: not self._waiting and not self._running)
        self._pool.close()
        if wait:
            self._pool.join()
