"""What asyncio itself costs per delivery future, before any producer work (issue 25).

Why: ``await producer.send()`` hands out one delivery future per record, resolved with one
``RecordMetadata`` at the acknowledgement. Whatever the producer does, a record that is
confirmed costs at least: making the future, resolving it, and the caller's way of waiting
(``gather`` over many, or ``await`` on each). This script measures those parts on their own,
so the per-record goals can be set against a floor no asyncio client goes below.

It also measures ``experiments/light_future.pyx``, a minimal future in C, where Cython is
installed (``pip install cython``; built on first use by ``pyximport``): that is what a
delivery future of our own, instead of ``asyncio.Future``, would save.

Run: ``.venv/bin/python benchmarks/asyncio_floor.py`` (``--records N``, default 200,000).
CPU µs per future, median of 5 rounds; with the garbage collector on (the default a user has)
and off (how much of it is the collector walking the live futures).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiokprod.record_metadata import RecordMetadata

ROUNDS = 5

Maker = Callable[[asyncio.AbstractEventLoop], Any]


def _light_future() -> Maker | None:
    try:
        import pyximport
    except ImportError:
        return None
    sys.path.insert(0, str(Path(__file__).parent / "experiments"))
    pyximport.install(language_level=3)
    from light_future import LightFuture  # type: ignore[import-not-found]

    return LightFuture  # type: ignore[no-any-return]


async def _measure(make: Maker, records: int) -> dict[str, float]:
    """One round: CPU seconds of each part, for ``records`` futures kept alive together."""
    loop = asyncio.get_running_loop()
    per = 1e6 / records
    out: dict[str, float] = {}

    t = time.process_time()
    futures = [make(loop) for _ in range(records)]
    out["create, kept alive"] = (time.process_time() - t) * per

    t = time.process_time()
    for i, future in enumerate(futures):
        future.set_result(RecordMetadata("t", 0, i, 0, -1, 100))
    out["RecordMetadata + set_result"] = (time.process_time() - t) * per

    t = time.process_time()
    for future in futures:
        await future
    out["await each (done)"] = (time.process_time() - t) * per

    # gather as a caller uses it: over pending futures, resolved while it waits (the first set
    # dropped, so the collector walks one set, as in a producer's confirm-gather run)
    del futures
    pending = [make(loop) for _ in range(records)]

    async def resolve() -> None:
        await asyncio.sleep(0)
        for i, future in enumerate(pending):
            future.set_result(RecordMetadata("t", 0, i, 0, -1, 100))

    resolver = loop.create_task(resolve())
    t = time.process_time()
    results = await asyncio.gather(*pending)
    gather_and_resolve = time.process_time() - t
    await resolver
    assert len(results) == records
    out["gather (its own part)"] = gather_and_resolve * per - out["RecordMetadata + set_result"]

    async def coroutine() -> int:
        return 1

    t = time.process_time()
    for _ in range(records):
        await coroutine()
    out["a coroutine call + await"] = (time.process_time() - t) * per
    return out


def _rounds(make: Maker, records: int, gc_on: bool) -> dict[str, float]:
    rounds = []
    for _ in range(ROUNDS):
        gc.collect()
        if gc_on:
            gc.enable()
        else:
            gc.disable()
        try:
            rounds.append(asyncio.run(_measure(make, records)))
        finally:
            gc.enable()
    return {part: statistics.median(r[part] for r in rounds) for part in rounds[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    args = parser.parse_args()

    makers: dict[str, Maker] = {"asyncio.Future": lambda loop: loop.create_future()}
    light = _light_future()
    if light is None:
        print("LightFuture: skipped (Cython is not installed: pip install cython)")
    else:
        makers["LightFuture (C)"] = light

    columns = [(name, gc_on) for name in makers for gc_on in (True, False)]
    measured = {(name, gc_on): _rounds(makers[name], args.records, gc_on)
                for name, gc_on in columns}
    print(f"\nCPU µs per future, {args.records:,} alive, median of {ROUNDS} rounds, "
          f"Python {sys.version.split()[0]}")
    header = "".join(f"{name + (' gc on' if gc_on else ' gc off'):>24}" for name, gc_on in columns)
    print(f"{'':30}{header}")
    for part in measured[columns[0]]:
        row = "".join(f"{measured[c][part]:>24.2f}" for c in columns)
        print(f"{part:30}{row}")
    confirm_gather = ("create, kept alive", "RecordMetadata + set_result",
                      "gather (its own part)", "a coroutine call + await")
    row = "".join(f"{sum(measured[c][p] for p in confirm_gather):>24.2f}" for c in columns)
    print(f"{'= confirm-gather floor':30}{row}")


if __name__ == "__main__":
    main()
