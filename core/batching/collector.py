"""Python's garbage collector while a model is served: the heap alive before is set aside.

A full (generation 2) collection walks every tracked object in the process and holds every
thread meanwhile, the sender's and the serving threads' alike. In a process that has imported
ONNX Runtime, OpenVINO and the studio it took 23-58 ms, three to six times in thirty 8-s Verify
runs (2026-12-07, `bench/batching.py --verify-zoo`, which times each one), and the requests
that arrived meanwhile waited: at 6,000 req/s one 50-ms collection made a Verify's p99 11 ms
against a band's top of 5 (docs/BENCHMARKS.md). `frozen_heap()` moves every object alive into
the collector's permanent generation (`gc.freeze`) for the length of the block, so the collections
during it walk only what the serving allocated since; afterwards the heap is the collector's again
(`gc.unfreeze`), garbage frozen with it included, which the next collections free. It collects
nothing first: a collection of that heap (15-35 ms) is what the block is there to spare. Blocks
may nest or overlap across threads: the first in freezes, the last out unfreezes.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_open = 0


@contextmanager
def frozen_heap() -> Iterator[None]:
    """The heap alive on entry kept out of the collector's walks until the block ends."""
    global _open
    with _lock:
        if _open == 0:
            gc.freeze()
        _open += 1
    try:
        yield
    finally:
        with _lock:
            _open -= 1
            if _open == 0:
                gc.unfreeze()
