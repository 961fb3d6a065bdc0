"""asyncio: await sub.atake() and `async for msg in sub`."""
import asyncio
import threading
import time

import pytest

import rgaps

np = pytest.importorskip("numpy")


def publish_later(topic, n, delay=0.05):
    def run():
        with rgaps.Publisher(topic) as pub:
            for i in range(n):
                time.sleep(delay)
                pub.publish(np.full(3, i, np.int16))

    t = threading.Thread(target=run)
    t.start()
    return t


def test_async_for(topic):
    async def main():
        seen = []
        with rgaps.Subscriber(topic) as sub:
            t = publish_later(topic, 10, 0.01)
            async for msg in sub:
                with msg:
                    seen.append(np.asarray(msg).tolist())
                if len(seen) == 10:
                    break
        t.join(10)
        return seen

    seen = asyncio.run(asyncio.wait_for(main(), 30))
    assert seen == [[i] * 3 for i in range(10)]


def test_atake_timeout_and_other_tasks_run(topic):
    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        with rgaps.Subscriber(topic) as sub:
            start = time.monotonic()
            with pytest.raises(rgaps.Timeout, match="atake"):
                await sub.atake(timeout=0.3)
            waited = time.monotonic() - start
        task.cancel()
        return waited, ticks

    waited, ticks = asyncio.run(main())
    assert waited >= 0.3 and ticks > 0  # the loop kept running while we waited


def test_two_subscribers_in_one_loop(topic):
    async def consume(sub, n):
        out = []
        for _ in range(n):
            with await sub.atake(timeout=20) as m:
                out.append(int(np.asarray(m)[0]))
        return out

    async def main():
        with rgaps.Subscriber(topic) as a, rgaps.Subscriber(topic) as b:
            t = publish_later(topic, 5)
            ra, rb = await asyncio.gather(consume(a, 5), consume(b, 5))
        t.join(10)
        return ra, rb

    ra, rb = asyncio.run(main())
    assert ra == rb == [0, 1, 2, 3, 4]
