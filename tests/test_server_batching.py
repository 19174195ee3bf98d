"""The micro-batcher alone: requests of one key share a call, keys never mix, row limits hold, errors reach every
waiting request and the worker keeps going."""

import asyncio
import threading

import pytest

from textfree.server.batching import MicroBatcher


class Recorder:
    def __init__(self, fail_on=None):
        self.calls = []
        self.fail_on = fail_on
        self.lock = threading.Lock()

    def __call__(self, key, items):
        with self.lock:
            self.calls.append((key, list(items)))
        if self.fail_on is not None and self.fail_on in items:
            raise RuntimeError("model exploded")
        return [f"{key}:{item}" for item in items]


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=10))


def test_concurrent_requests_share_one_call_and_get_their_own_results():
    fn = Recorder()
    batcher = MicroBatcher(fn, max_rows=8, max_wait_s=0.2)

    async def main():
        return await asyncio.gather(batcher.submit("k", "a"), batcher.submit("k", "b"), batcher.submit("k", "c"))

    results = run(main())
    assert [r for r, _ in results] == ["k:a", "k:b", "k:c"]
    assert len(fn.calls) == 1 and fn.calls[0] == ("k", ["a", "b", "c"])
    assert all(info.requests == 3 and info.rows == 3 for _, info in results)


def test_a_full_batch_runs_without_waiting_out_the_window():
    fn = Recorder()
    batcher = MicroBatcher(fn, max_rows=2, max_wait_s=5.0)

    async def main():
        loop = asyncio.get_running_loop()
        start = loop.time()
        out = await asyncio.gather(batcher.submit("k", "a"), batcher.submit("k", "b"))
        return out, loop.time() - start

    out, elapsed = run(main())
    assert elapsed < 2.0 and [r for r, _ in out] == ["k:a", "k:b"]


def test_keys_do_not_mix_and_row_limits_split_calls():
    fn = Recorder()
    batcher = MicroBatcher(fn, max_rows=2, max_wait_s=0.05)

    async def main():
        jobs = [batcher.submit("x", 1), batcher.submit("y", 2), batcher.submit("x", 3), batcher.submit("x", 4)]
        return await asyncio.gather(*jobs)

    results = run(main())
    assert [r for r, _ in results] == ["x:1", "y:2", "x:3", "x:4"]
    assert all(len(items) <= 2 for _, items in fn.calls)
    assert sorted((k, tuple(i)) for k, i in fn.calls) == [("x", (1, 3)), ("x", (4,)), ("y", (2,))]
    # a single request larger than max_rows still runs (alone)
    assert run(batcher.submit("x", 9, rows=5))[1].rows == 5


def test_an_error_reaches_every_request_of_the_call_and_the_worker_survives():
    fn = Recorder(fail_on="bad")
    batcher = MicroBatcher(fn, max_rows=4, max_wait_s=0.1)

    async def main():
        out = await asyncio.gather(batcher.submit("k", "ok"), batcher.submit("k", "bad"), return_exceptions=True)
        after = await batcher.submit("k", "later")
        await batcher.close()
        return out, after

    out, after = run(main())
    assert all(isinstance(r, RuntimeError) for r in out)
    assert after[0] == "k:later"


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        MicroBatcher(lambda k, i: i, max_rows=0)


class Overlap:
    """Sleeps in every call and records the most calls that ran at once."""

    def __init__(self):
        self.running = self.most = 0
        self.lock = threading.Lock()

    def __call__(self, key, items):
        import time

        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(0.2)
        with self.lock:
            self.running -= 1
        return [f"{key}:{item}" for item in items]


@pytest.mark.parametrize("max_concurrent, expected", [(1, 1), (3, 3)])
def test_max_concurrent_bounds_the_calls_in_flight(max_concurrent, expected):
    fn = Overlap()
    batcher = MicroBatcher(fn, max_rows=1, max_wait_s=0.0, max_concurrent=max_concurrent)

    async def main():
        return await asyncio.gather(*(batcher.submit("k", i) for i in range(4)))

    results = run(main())
    assert [r for r, _ in results] == [f"k:{i}" for i in range(4)]
    assert fn.most == expected
