"""Recognition that weighs its evidence: metadata alone never decides, a softmax written in
primitive ops is still a softmax, and every recognition states its confidence and reasons."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from evaluator_graphs import classifier_model, save, tensor, unknown_model, weight
from onnx import TensorProto, helper

from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.accuracy import accuracy_report
from optistudio.core.numerics.evaluators.base import Recognition, evaluators
from optistudio.core.numerics.evaluators.evidence import Evidence
from optistudio.core.numerics.evaluators.label_metadata import parse_names
from optistudio.core.numerics.evaluators.recognize import (
    Weighed,
    decide,
    model_facts,
    read_task,
    recognize_task,
    weigh_cases,
)
from optistudio.core.optimize.run import OptimizeSpec, task_judge

LAYOUT_LABELS = ["text", "title", "list", "table", "figure"]
LETTERS = [chr(ord("a") + i) for i in range(26)]


def picodet_layout_model(path: Path, *, dynamic: bool = False) -> Path:
    """A PicoDet-like layout detector on a 32 x 32 image: per stride (8, 16) a 1x1 Conv to 5
    class logits -> Sigmoid and one to 32 box bins (4 sides x 8), each reshaped to [1, cells,
    channels]; its label names listed under 'character', as PaddleDetection writes them.
    `dynamic`: the outputs' cell counts declared dynamic, so no head pairs by shape."""
    nodes, outputs, weights = [], [], []
    for head, stride in enumerate((8, 16)):
        cells = (32 // stride) ** 2
        for kind, channels in (("cls", 5), ("reg", 32)):
            name, raw = f"{kind}{head}", f"{kind}{head}_raw"
            weights += [
                weight(f"{name}_w", (channels, 3, 1, 1), seed=head),
                helper.make_tensor(f"{name}_shape", TensorProto.INT64, [3], [1, channels, -1]),
            ]
            nodes += [
                helper.make_node("Conv", ["image", f"{name}_w"], [raw], strides=[stride] * 2),
                helper.make_node("Reshape", [raw, f"{name}_shape"], [f"{name}_flat"]),
                helper.make_node(
                    "Transpose",
                    [f"{name}_flat"],
                    [name if kind == "reg" else f"{name}_logits"],
                    perm=[0, 2, 1],
                ),
            ]
            if kind == "cls":
                nodes.append(helper.make_node("Sigmoid", [f"{name}_logits"], [name]))
            outputs.append(tensor(name, [1, f"A{head}" if dynamic else cells, channels]))
    return save(
        path,
        nodes,
        [tensor("image", [1, 3, 32, 32])],
        outputs,
        initializers=weights,
        metadata={"character": "\n".join(LAYOUT_LABELS)},
    )


def text_line_recognizer(path: Path, charset: list[str], classes: int) -> Path:
    """x [N, 3, 48, W] -> mean over the height -> [N, W, 3] -> MatMul -> Softmax: per-step
    scores [N, T, C], with PaddleOCR's 'character' list."""
    return save(
        path,
        [
            helper.make_node("ReduceMean", ["x"], ["columns"], axes=[2], keepdims=0),
            helper.make_node("Transpose", ["columns"], ["steps"], perm=[0, 2, 1]),
            helper.make_node("MatMul", ["steps", "W"], ["logits"]),
            helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
        ],
        [tensor("x", ["N", 3, 48, "W"])],
        [tensor("probs", ["N", "T", classes])],
        initializers=[weight("W", (3, classes))],
        metadata={"character": "\n".join(charset)},
    )


def primitive_softmax_classifier(path: Path, written: str, classes: int = 10) -> Path:
    """An image classifier whose softmax is written out (as Paddle exports some): x [N, 3, 8, 8]
    -> GlobalAveragePool -> Flatten -> Gemm -> exp / sum(exp), `written` as
    'div' (opset 17, axes an input), 'stabilised' (the max subtracted first), 'opset11'
    (axes an attribute), 'reciprocal' (times 1 / sum) or 'jax2tf' (max floored by a constant
    and sum reduced without their axis, each reshaped and expanded back, as magika's is)."""
    opset = 11 if written == "opset11" else 17
    head = [
        helper.make_node("GlobalAveragePool", ["x"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("Gemm", ["flat", "W", "b"], ["logits"]),
    ]
    weights = [weight("W", (3, classes)), weight("b", (classes,), seed=1)]
    exp_of = "logits"
    if written == "stabilised":
        head += [
            helper.make_node("ReduceMax", ["logits"], ["top"], axes=[1], keepdims=1),
            helper.make_node("Sub", ["logits", "top"], ["shifted"]),
        ]
        exp_of = "shifted"
    if written == "jax2tf":
        return jax2tf_softmax(path, head, weights, classes)
    head.append(helper.make_node("Exp", [exp_of], ["e"]))
    if opset < 13:
        head.append(helper.make_node("ReduceSum", ["e"], ["s"], axes=[1], keepdims=1))
    else:
        weights.append(helper.make_tensor("axes", TensorProto.INT64, [1], [1]))
        head.append(helper.make_node("ReduceSum", ["e", "axes"], ["s"], keepdims=1))
    if written == "reciprocal":
        head += [
            helper.make_node("Reciprocal", ["s"], ["inverse"]),
            helper.make_node("Mul", ["e", "inverse"], ["probs"]),
        ]
    else:
        head.append(helper.make_node("Div", ["e", "s"], ["probs"]))
    return save(
        path,
        head,
        [tensor("x", ["N", 3, 8, 8])],
        [tensor("probs", ["N", classes])],
        initializers=weights,
        opset=opset,
    )


def jax2tf_softmax(
    path: Path, head: list[onnx.NodeProto], weights: list[onnx.TensorProto], classes: int
) -> Path:
    """The softmax as jax2tf writes it: reductions without keepdims broadcast back."""
    weights += [
        helper.make_tensor("floor", TensorProto.FLOAT, [], [-3.0e38]),
        helper.make_tensor("column", TensorProto.INT64, [2], [-1, 1]),
        helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
    ]
    head += [
        helper.make_node("Shape", ["logits"], ["shape"]),
        helper.make_node("ReduceMax", ["logits"], ["top"], axes=[1], keepdims=0),
        helper.make_node("Max", ["floor", "top"], ["safe_top"]),
        helper.make_node("Reshape", ["safe_top", "column"], ["top_column"]),
        helper.make_node("Expand", ["top_column", "shape"], ["top_wide"]),
        helper.make_node("Sub", ["logits", "top_wide"], ["shifted"]),
        helper.make_node("Exp", ["shifted"], ["e"]),
        helper.make_node("ReduceSum", ["e", "axes"], ["s"], keepdims=0),
        helper.make_node("Reshape", ["s", "column"], ["s_column"]),
        helper.make_node("Expand", ["s_column", "shape"], ["s_wide"]),
        helper.make_node("Div", ["e", "s_wide"], ["probs"]),
    ]
    return save(
        path,
        head,
        [tensor("x", ["N", 3, 8, 8])],
        [tensor("probs", ["N", classes])],
        initializers=weights,
    )


# metadata alone never decides -----------------------------------------------------------------


def test_a_picodet_listing_its_labels_as_character_is_a_detector_not_ctc(tmp_path: Path) -> None:
    """The failure measured on PaddleDetection's layout model: its box bins [1, cells, 32]
    read with the 'character' list as a text recognizer's."""
    facts = model_facts(picodet_layout_model(tmp_path / "m.onnx"))

    reading = read_task(facts)
    cases = {case.info.name: case for case in weigh_cases(facts)}

    assert reading.found is not None
    info, recognition = reading.found
    assert info.name == "detection_boxes" and recognition.confidence == "high"
    assert recognition.outputs == ["cls0", "reg0", "cls1", "reg1"]
    assert "+1 metadata: the 'character' metadata lists 5 names, one per class" in "\n".join(
        recognition.reasons
    )
    ctc = "\n".join(item.line() for item in cases["ctc_text"].evidence)
    assert "-2 metadata: the 'character' list has 5 entries, where 32 classes would need" in ctc
    assert cases["ctc_text"].total < 0


def test_a_picodet_whose_heads_do_not_pair_falls_back_not_to_ctc(tmp_path: Path) -> None:
    facts = model_facts(picodet_layout_model(tmp_path / "m.onnx", dynamic=True))

    reading = read_task(facts)

    assert reading.found is None
    assert reading.why_none == "no task recognized: the evidence for each task is too weak"
    (ctc,) = [line for line in reading.reasons if line.startswith("not ctc_text")]
    assert ctc.startswith("not ctc_text: what the graph shows for it is outweighed by what")
    assert "'character' list has 5 entries, where 32 classes would need 30 or 31" in ctc
    assert "3 other outputs beside" in ctc


def test_a_ctc_recognizer_with_a_matching_character_list_is_ctc_with_high_confidence(
    tmp_path: Path,
) -> None:
    path = text_line_recognizer(tmp_path / "m.onnx", LETTERS, classes=len(LETTERS) + 2)

    info, recognition = recognize_task(model_facts(path)) or (None, None)

    assert info is not None and recognition is not None
    assert (info.name, recognition.confidence) == ("ctc_text", "high")
    assert recognition.vocabulary == LETTERS
    assert recognition.reasons[:3] == [
        "+3 graph: probs [N, T, 28] after Softmax on the last axis: per-step scores",
        "+2 metadata: the 'character' list has 26 entries: with the blank and a space, "
        "the 28 classes",
        "+1 inputs: x [N, 3, 48, W]: a text-line image",
    ]


def test_a_character_list_of_another_length_lowers_a_recognizers_confidence(tmp_path: Path) -> None:
    path = text_line_recognizer(tmp_path / "m.onnx", LETTERS[:5], classes=28)

    info, recognition = recognize_task(model_facts(path)) or (None, None)

    assert info is not None and recognition is not None
    assert (info.name, recognition.confidence) == ("ctc_text", "low")
    assert any(reason.startswith("-2 metadata") for reason in recognition.reasons)


@pytest.mark.parametrize(
    ("nodes", "output"),
    [
        ([helper.make_node("Relu", ["x"], ["y"])], ["N", 40]),
        ([helper.make_node("Softmax", ["x"], ["y"])], ["N", "T", 40]),  # opset 11: over the steps
    ],
    ids=["plain-vector", "softmax-over-steps"],
)
def test_metadata_alone_on_an_ambiguous_graph_does_not_decide(
    tmp_path: Path, nodes: list, output: list
) -> None:
    """A 'character' list that fits the class count (38 + blank + space = 40) and 40 label
    names, on a graph whose outputs speak for no task."""
    metadata = {"character": "\n".join(f"c{i}" for i in range(38)), "names": str(list(range(40)))}
    path = save(
        tmp_path / "m.onnx",
        nodes,
        [tensor("x", output)],
        [tensor("y", output)],
        metadata=metadata,
        opset=11,
    )

    reading = read_task(model_facts(path))

    assert reading.found is None
    assert reading.why_none.startswith("no task recognized")
    assert reading.reasons[1].startswith("not ctc_text: ")
    assert "and metadata alone never decides (" in reading.reasons[1]


# a softmax written in primitive ops -----------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "chain"),
    [
        ("div", "Exp / ReduceSum / Div"),
        ("stabilised", "ReduceMax / Sub / Exp / ReduceSum / Div"),
        ("opset11", "Exp / ReduceSum / Div"),
        ("reciprocal", "Exp / ReduceSum / Reciprocal / Mul"),
        ("jax2tf", "ReduceMax / Sub / Exp / ReduceSum / Div"),
    ],
    ids=["div", "max-subtracted", "opset-11-axes", "reciprocal", "jax2tf-broadcast-back"],
)
def test_a_softmax_written_in_primitive_ops_is_a_classifier(
    tmp_path: Path, written: str, chain: str
) -> None:
    facts = model_facts(primitive_softmax_classifier(tmp_path / "m.onnx", written))

    output = facts.outputs[0]
    info, recognition = recognize_task(facts) or (None, None)

    assert (output.producer, output.producer_axis, output.feeds) == ("Softmax", 1, ["Gemm"])
    assert output.written_as == chain
    assert info is not None and recognition is not None
    assert (info.name, recognition.confidence) == ("classification", "high")
    assert f"probs [N, 10] after Softmax (written as {chain}) on the last axis" in (
        recognition.reason
    )
    embedding = [case for case in weigh_cases(facts) if case.info.name == "embedding"]
    assert embedding and embedding[0].total < 0  # scores per class, not a direction


def test_a_written_out_softmax_gets_top1_in_the_accuracy_report(tmp_path: Path) -> None:
    model = primitive_softmax_classifier(tmp_path / "m.onnx", "stabilised")

    report = accuracy_report(model, model, SyntheticDataset(inspect_model(model).inputs, samples=4))

    assert report.output_role == "classifier" and report.top1_agreement == 1.0


def test_a_sum_without_exp_is_no_softmax(tmp_path: Path) -> None:
    """x / sum(x) normalises, but is no softmax: read as what it is, a Div."""
    path = save(
        tmp_path / "m.onnx",
        [
            helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=1),
            helper.make_node("Div", ["x", "s"], ["y"]),
        ],
        [tensor("x", ["N", 16])],
        [tensor("y", ["N", 16])],
        initializers=[helper.make_tensor("axes", TensorProto.INT64, [1], [1])],
    )

    facts = model_facts(path)
    found = recognize_task(facts)

    assert (facts.outputs[0].producer, facts.outputs[0].written_as) == ("Div", "")
    assert found is not None and found[0].name == "embedding"


# confidence, reasons, conflicts -------------------------------------------------------------


def test_every_recognition_states_its_confidence_and_weighed_reasons(tmp_path: Path) -> None:
    facts = model_facts(classifier_model(tmp_path / "m.onnx"))

    _, recognized = recognize_task(facts) or (None, None)
    _, chosen = recognize_task(facts, task="classification") or (None, None)

    assert recognized is not None and recognized.confidence == "medium"
    assert recognized.reasons == [
        "+2 graph: logits [N, 10] after MatMul + bias: a linear head's logits",
        "+1 name: named 'logits', like scores",
    ]
    assert chosen is not None and chosen.confidence is None  # set by the user: not weighed
    assert chosen.reasons == ["set by the user: no evidence weighed"]


def test_a_recognition_stored_before_confidence_still_reads() -> None:
    old = Recognition.model_validate({"task": "ctc_text", "reason": "r", "outputs": ["probs"]})

    assert (old.confidence, old.reasons) == (None, [])


def cases(*totals: tuple[str, str, float]) -> list[Weighed]:
    return [
        Weighed(
            evaluators.get(task),
            Recognition(task=task, reason=task, outputs=[output]),
            [Evidence(kind="structure", weight=total, text=f"{output} read as {task}")],
        )
        for task, output, total in totals
    ]


def test_two_tasks_reading_one_output_as_strongly_conflict() -> None:
    reading = decide(cases(("classification", "y", 3), ("embedding", "y", 3)))

    assert reading.found is None
    assert reading.why_none == (
        "no task recognized: the evidence conflicts, y reads as classification (3) and as "
        "embedding (3)"
    )


@pytest.mark.parametrize(
    ("totals", "winner"),
    [
        ((("embedding", "y", 4), ("classification", "y", 3)), "embedding"),
        ((("embedding", "a", 3), ("classification", "b", 3)), "classification"),
    ],
    ids=["same-output-a-point-ahead", "other-outputs-tie-to-priority"],
)
def test_the_heavier_case_wins_and_the_runner_up_is_named(
    totals: tuple[tuple[str, str, float], ...], winner: str
) -> None:
    reading = decide(cases(*totals))

    assert reading.found is not None and reading.found[0].name == winner
    assert reading.reasons[-1].startswith("ahead of ")


def test_an_unrecognized_model_says_why_where_optimize_shows_it(tmp_path: Path) -> None:
    path = unknown_model(tmp_path / "m.onnx")

    judge, budget, reasons = task_judge(path, OptimizeSpec(), None, None)

    assert (judge, budget) == (None, None)
    assert reasons == ("no task recognized: no output is shaped or made like any task's",)


def test_optimize_carries_the_recognition_confidence_and_reasons(tmp_path: Path) -> None:
    path = primitive_softmax_classifier(tmp_path / "m.onnx", "div")

    judge, _, reasons = task_judge(path, OptimizeSpec(), None, None)

    assert judge is not None and judge.recognition.confidence == "high"
    assert reasons[0].startswith("+3 graph: probs [N, 10] after Softmax (written as")


@pytest.mark.parametrize(
    ("text", "names"),
    [
        (
            "{0: 'person', 1: 'bicycle', 10: 'bench', 2: 'car'}",
            ["person", "bicycle", "car", "bench"],
        ),
        ('{"0": "cat", "1": "dog"}', ["cat", "dog"]),
        ('["a", "b"]', ["a", "b"]),
        ("text\ntitle", ["text", "title"]),
        ("cat, dog", ["cat", "dog"]),
        ("", []),
    ],
    ids=["ultralytics", "id2label", "json-list", "lines", "commas", "empty"],
)
def test_label_names_read_as_exporters_write_them(text: str, names: list[str]) -> None:
    assert parse_names(text) == names


def test_the_picodet_layout_model_runs(tmp_path: Path) -> None:
    """The graph the recognition tests read is a real model ONNX Runtime runs."""
    import onnxruntime as ort

    path = picodet_layout_model(tmp_path / "m.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    shapes = [
        out.shape for out in session.run(None, {"image": np.ones((1, 3, 32, 32), np.float32)})
    ]

    assert shapes == [(1, 16, 5), (1, 16, 32), (1, 4, 5), (1, 4, 32)]
