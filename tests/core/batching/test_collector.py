"""The heap alive before a load run or a server is kept out of Python's collections during it."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

from batching_helpers import row

from optistudio.core.batching.collector import frozen_heap
from optistudio.core.batching.loadgen import run_load
from optistudio.core.batching.pipeline import Pipeline
from optistudio.core.batching.settings import BatchingSettings


def test_the_heap_is_frozen_inside_the_block_and_the_collectors_again_after() -> None:
    alive = [[] for _ in range(1000)]  # tracked objects alive on entry
    before = gc.get_freeze_count()

    with frozen_heap():
        inside = gc.get_freeze_count()
        made = [[] for _ in range(1000)]  # allocated inside: still the collector's
        gc.collect()
        after_collect = gc.get_freeze_count()

    assert before == 0 and inside >= len(alive)
    assert after_collect == inside  # a collection inside walks only what came since
    assert gc.get_freeze_count() == 0 and len(made) == 1000


def test_nested_and_overlapping_blocks_unfreeze_with_the_last_one_out() -> None:
    entered, leave = threading.Event(), threading.Event()

    def other() -> None:
        with frozen_heap():
            entered.set()
            leave.wait(10)

    thread = threading.Thread(target=other)
    with frozen_heap():
        thread.start()
        assert entered.wait(10)
        with frozen_heap():
            pass
        assert gc.get_freeze_count() > 0  # the inner block's end keeps the outer freeze
    assert gc.get_freeze_count() > 0  # the other thread's block is still open
    leave.set()
    thread.join(10)
    assert gc.get_freeze_count() == 0


class _Noted(Pipeline):
    """A real pipeline that notes, at each submit, how many objects the collector set aside."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.frozen: list[int] = []

    def submit(self, feeds):
        self.frozen.append(gc.get_freeze_count())
        return super().submit(feeds)


def test_a_load_run_serves_with_the_heap_set_aside(tiny_model: Path) -> None:
    settings = BatchingSettings(max_batch_size=8, timeout_ms=1)
    with _Noted.load(tiny_model, settings) as pipeline:
        run = run_load(pipeline, [row(1.0)], process="constant", rate=1000, requests=100)

    assert run.result.completed == 100
    assert min(pipeline.frozen) > 0  # every request sent with the heap set aside
    assert gc.get_freeze_count() == 0  # and the heap back with the collector after the run
