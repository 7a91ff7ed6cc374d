"""A model that declares its output wrongly (ddddocr's captcha recognizers declare [1, seqlen]
and return [T, 1, C]) or leaves it open (a PicoDet of any image size) is judged in the task its
real outputs show: the optimize run reads the task again from one run's shapes when the
declared ones speak for none."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.numerics.evaluators.recognize import as_run, model_facts
from optistudio.core.optimize.run import OptimizeSpec, task_judge

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "numerics" / "evaluators"))
from evaluator_graphs import picodet_image_model  # noqa: E402

CLASSES = 12


def time_major_recognizer(path: Path, declared: list) -> Path:
    """A text-line image [1, 1, 16, W] read column by column: [W, 1, 16] @ [16, 12] gives
    per-step logits [W, 1, 12] (time first), the output declared as `declared`."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((16, CLASSES)).astype(np.float32), "w"),
        numpy_helper.from_array(np.array([0, 1, 16], np.int64), "steps"),
    ]
    nodes = [
        helper.make_node("Transpose", ["line"], ["columns"], perm=[3, 0, 1, 2]),
        helper.make_node("Reshape", ["columns", "steps"], ["per_step"]),
        helper.make_node("MatMul", ["per_step", "w"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "crnn",
        [helper.make_tensor_value_info("line", TensorProto.FLOAT, [1, 1, 16, "W"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, declared)],
        initializer=weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


SPEC = OptimizeSpec(shapes={"line": [1, 1, 16, 48]})


def test_an_output_declared_wrongly_is_read_at_the_shape_a_run_returns(tmp_path: Path) -> None:
    model = time_major_recognizer(tmp_path / "m.onnx", [1, "seqlen"])

    choice = task_judge(model, SPEC, None, None)

    assert choice.judge is not None
    assert choice.judge.recognition.task == "ctc_text"
    assert choice.judge.recognition.reason.startswith("logits [48, 1, 12] after MatMul")


def test_an_open_dim_is_read_at_the_size_the_run_had(tmp_path: Path) -> None:
    model = time_major_recognizer(tmp_path / "m.onnx", ["W", 1, "classes"])

    ran = as_run(model_facts(model), {"logits": [48, 1, CLASSES]})

    assert ran is not None and ran.outputs[0].shape == [48, 1, CLASSES]


def test_a_declaration_the_run_confirms_is_not_rewritten(tmp_path: Path) -> None:
    model = time_major_recognizer(tmp_path / "m.onnx", [48, 1, CLASSES])

    assert as_run(model_facts(model), {"logits": [48, 1, CLASSES]}) is None


def test_a_picodet_of_open_size_is_placed_on_the_grid_of_the_image_fed(tmp_path: Path) -> None:
    model = picodet_image_model(tmp_path / "m.onnx", 48, 32, dynamic=True)
    spec = OptimizeSpec(shapes={"image": [1, 3, 48, 32]})

    choice = task_judge(model, spec, None, None)

    assert choice.judge is not None
    assert choice.judge.recognition.task == "detection_boxes"
    assert choice.judge.recognition.image_size == (48, 32)
