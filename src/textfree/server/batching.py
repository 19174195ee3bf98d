"""A small async micro-batcher: requests for the same model call wait up to ``max_wait_s`` (or until
``max_rows`` rows are queued) and then run as ONE call of a blocking function in a worker thread.

``fn(key, items) -> results`` gets the queued items of one key in arrival order and returns one result per item.
Items of another key wait for the next call. One call runs at a time per batcher (one batcher per model), so the
model is never entered from two threads at once; ``max_concurrent > 1`` lets that many calls run at once (the vLLM
gateway, whose calls wait on another server).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Sequence

import anyio.to_thread

__all__ = ["MicroBatcher", "BatchInfo"]


@dataclass(frozen=True)
class BatchInfo:
    """What a request learns about the call that served it."""

    rows: int  # rows in the model call (>= the request's own rows when it shared the call)
    requests: int  # requests in the model call
    queue_s: float  # time from submit to the start of the call
    compute_s: float  # duration of the call


@dataclass
class _Job:
    key: Hashable
    rows: int
    item: Any
    future: asyncio.Future
    submitted: float = field(default_factory=time.perf_counter)


class MicroBatcher:
    def __init__(
        self,
        fn: Callable[[Hashable, list[Any]], Sequence[Any]],
        *,
        max_rows: int = 16,
        max_wait_s: float = 0.005,
        on_batch: Callable[[int, int], None] | None = None,
        max_concurrent: int = 1,
    ):
        if max_rows < 1 or max_wait_s < 0 or max_concurrent < 1:
            raise ValueError("MicroBatcher needs max_rows >= 1, max_wait_s >= 0 and max_concurrent >= 1")
        self.fn = fn
        self.max_concurrent = max_concurrent
        self.max_rows = max_rows
        self.max_wait_s = max_wait_s
        self.on_batch = on_batch
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[_Job] = []
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self._slots: asyncio.Semaphore | None = None
        self._calls: set[asyncio.Task] = set()

    @property
    def queue_depth(self) -> int:
        """Requests waiting for a model call (not counting the one running)."""
        return sum(1 for j in self._pending if not j.future.done())

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # first use, or a new event loop (tests): start afresh on this one
            self._loop, self._pending, self._wakeup = loop, [], asyncio.Event()
            self._worker, self._slots, self._calls = None, asyncio.Semaphore(self.max_concurrent), set()
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._run(), name="textfree-microbatcher")

    async def submit(self, key: Hashable, item: Any, *, rows: int = 1) -> tuple[Any, BatchInfo]:
        """Queue ``item`` (``rows`` rows) for a call with ``key``; returns (its result, BatchInfo)."""
        self._start()
        job = _Job(key, rows, item, self._loop.create_future())
        self._pending.append(job)
        self._wakeup.set()
        return await job.future

    async def close(self) -> None:
        for task in [self._worker, *self._calls]:
            if task is not None and not task.done():
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass
        for job in self._pending:
            if not job.future.done():
                job.future.cancel()
        self._pending = []

    def _select(self, key: Hashable) -> list[_Job]:
        chosen, rows = [], 0
        for job in self._pending:
            if job.key != key or job.future.done():
                continue
            if chosen and rows + job.rows > self.max_rows:
                break
            chosen.append(job)
            rows += job.rows
        return chosen

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._pending = [j for j in self._pending if not j.future.done()]  # drop cancelled requests
            if not self._pending:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            await self._slots.acquire()  # released when the call ends: at most max_concurrent calls run
            self._pending = [j for j in self._pending if not j.future.done()]
            if not self._pending:
                self._slots.release()
                continue
            key = self._pending[0].key
            deadline = loop.time() + self.max_wait_s
            while sum(j.rows for j in self._select(key)) < self.max_rows and loop.time() < deadline:
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), timeout=max(deadline - loop.time(), 0))
                except asyncio.TimeoutError:
                    break
            batch = self._select(key)
            if not batch:
                self._slots.release()
                continue
            taken = set(map(id, batch))
            self._pending = [j for j in self._pending if id(j) not in taken]
            call = loop.create_task(self._call(key, batch))
            self._calls.add(call)  # (a reference, so the task is not collected while it runs)
            call.add_done_callback(self._calls.discard)

    async def _call(self, key: Hashable, batch: list[_Job]) -> None:
        rows = sum(j.rows for j in batch)
        start = time.perf_counter()
        try:
            results = await anyio.to_thread.run_sync(self.fn, key, [j.item for j in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"batch function returned {len(results)} results for {len(batch)} items")
        except Exception as exc:  # every waiting request gets the error; the worker keeps going
            for j in batch:
                if not j.future.done():
                    j.future.set_exception(exc)
            return
        except asyncio.CancelledError:  # close(): nobody will answer these
            for j in batch:
                j.future.cancel()
            raise
        finally:
            self._slots.release()
        compute = time.perf_counter() - start
        if self.on_batch is not None:
            self.on_batch(len(batch), rows)
        for j, result in zip(batch, results):
            if not j.future.done():
                j.future.set_result((result, BatchInfo(rows, len(batch), start - j.submitted, compute)))
