"""Classification, CTC text, embeddings and regression tallies on arrays with known answers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from evaluator_graphs import classifier_model, ctc_model

from optistudio.core.errors import DataMismatch, ErrorCode, OutputsDiffer
from optistudio.core.numerics.evaluators.base import Disagreement, Recognition, evaluators
from optistudio.core.numerics.evaluators.ctc_text import edit_distance, greedy_decode
from optistudio.core.numerics.evaluators.embedding import nearest
from optistudio.core.numerics.evaluators.recognize import model_facts, recognize_task
from optistudio.core.numerics.evaluators.tallying import WorstSamples


def judge(task: str, outputs: list[str], ref: dict, cand: dict, labels=None, batches: int = 1):
    """Score `cand` against `ref` (arrays by output name), fed in `batches` slices."""
    recognition = Recognition(task=task, reason="test", outputs=outputs)
    tally = evaluators.get(task).create().tally(recognition, labels)
    rows = len(next(iter(ref.values())))
    for part in np.array_split(np.arange(rows), batches):
        tally.add(
            {name: array[part] for name, array in ref.items()},
            {name: array[part] for name, array in cand.items()},
            first_sample=int(part[0]),
        )
    return tally.score()


# classification ----------------------------------------------------------------------------

SCORES = np.array(
    [
        [0.70, 0.10, 0.05, 0.05, 0.05, 0.05],
        [0.05, 0.80, 0.05, 0.05, 0.03, 0.02],
        [0.02, 0.02, 0.91, 0.01, 0.01, 0.03],
        [0.12, 0.10, 0.10, 0.50, 0.08, 0.10],
    ]
)


def flipped() -> np.ndarray:
    """Sample 2's top-1 moves from class 2 to class 5; class 2 stays second."""
    candidate = SCORES.copy()
    candidate[2] = [0.02, 0.02, 0.40, 0.04, 0.04, 0.48]
    return candidate


def test_a_flipped_class_costs_one_sample_of_agreement() -> None:
    score = judge("classification", ["p"], {"p": SCORES}, {"p": flipped()}, batches=2)

    assert score.metrics["top1_agreement"] == pytest.approx(0.75)
    assert score.metrics["top1_disagreement"] == pytest.approx(0.25)
    assert score.metrics["top5_agreement"] == pytest.approx(1.0)
    assert [entry.sample for entry in score.worst] == [2]
    assert (score.worst[0].reference, score.worst[0].candidate) == (
        "class 2 (0.91)",
        "class 5 (0.48)",
    )
    assert score.mode == "agreement" and score.samples == 4


def test_a_flip_where_the_original_all_but_split_the_sample_is_a_near_tie() -> None:
    reference = SCORES.copy()
    reference[1] = [0.05, 0.45, 0.40, 0.05, 0.03, 0.02]  # classes 1 and 2 within 0.05
    candidate = reference.copy()
    candidate[1] = [0.05, 0.40, 0.45, 0.05, 0.03, 0.02]  # near-tie flipped
    candidate[2] = flipped()[2]  # a clear flip: the original gave class 2 0.91

    score = judge("classification", ["p"], {"p": reference}, {"p": candidate})
    tied = judge("classification", ["p"], {"p": reference}, {"p": reference})

    assert score.metrics["top1_disagreement"] == pytest.approx(0.5)
    assert score.metrics["clear_top1_disagreement"] == pytest.approx(0.25)
    assert "1 of the 2 flips were near-ties" in score.note
    assert tied.metrics["clear_top1_disagreement"] == 0.0 and "near-ties" not in tied.note


def test_near_ties_are_read_from_logits_by_their_softmax() -> None:
    logits = np.log(np.array([[0.48, 0.47, 0.05], [0.90, 0.05, 0.05]]))
    swapped = logits[:, [1, 0, 2]]

    score = judge("classification", ["p"], {"p": logits * 1.0}, {"p": swapped})

    assert score.metrics["top1_disagreement"] == pytest.approx(1.0)
    assert score.metrics["clear_top1_disagreement"] == pytest.approx(0.5)


def test_top5_agreement_drops_when_the_original_pick_leaves_the_top_five() -> None:
    candidate = SCORES.copy()
    candidate[0] = [0.0, 0.2, 0.2, 0.2, 0.2, 0.2]  # class 0 from first to last

    score = judge("classification", ["p"], {"p": SCORES}, {"p": candidate})

    assert score.metrics["top5_agreement"] == pytest.approx(0.75)


def test_with_labels_the_drop_is_in_points() -> None:
    labels = np.array([0, 1, 2, 0])

    score = judge("classification", ["p"], {"p": SCORES}, {"p": flipped()}, labels, batches=3)

    assert score.mode == "labels"
    assert score.metrics["top1_accuracy_reference"] == pytest.approx(0.75)
    assert score.metrics["top1_accuracy_candidate"] == pytest.approx(0.5)
    assert score.metrics["top1_drop"] == pytest.approx(0.25)
    assert score.metrics["top5_drop"] == pytest.approx(0.0)
    assert score.worst[0].label == "class 2"


def test_flips_are_listed_most_confident_first_and_logits_read_as_softmax() -> None:
    logits = np.log(SCORES)
    candidate = logits[:, ::-1].copy()  # every top-1 moves

    score = judge("classification", ["p"], {"p": logits}, {"p": candidate})

    assert [entry.sample for entry in score.worst] == [2, 1, 0, 3]
    assert score.worst[0].reference == "class 2 (0.91)"


def test_labels_outside_the_classes_are_refused() -> None:
    with pytest.raises(DataMismatch, match=r"class ids in \[0, 6\)"):
        judge("classification", ["p"], {"p": SCORES}, {"p": SCORES}, np.array([0, 1, 2, 9]))


def test_too_few_labels_are_refused() -> None:
    with pytest.raises(DataMismatch, match="labels have 3 entries"):
        judge("classification", ["p"], {"p": SCORES}, {"p": SCORES}, np.array([0, 1, 2]))


def test_outputs_of_different_shapes_are_the_variants_fault_not_the_users() -> None:
    with pytest.raises(OutputsDiffer, match="differs in shape") as refused:
        judge("classification", ["p"], {"p": SCORES}, {"p": SCORES[:, :5]})

    assert refused.value.info().code is ErrorCode.outputs_differ


def test_the_same_values_in_another_shape_are_read_in_the_originals() -> None:
    """A pass that re-declares an output (the simplifier flattening [T, 1, C] to [1, T x C])
    leaves its values in order: they are judged, not refused."""
    recognition = Recognition(task="classification", reason="test", outputs=["p"])
    tally = evaluators.get("classification").create().tally(recognition)

    tally.add({"p": SCORES}, {"p": SCORES.reshape(1, -1)}, first_sample=0)

    assert tally.score().metrics["top1_disagreement"] == 0.0


def test_a_real_classifier_run_end_to_end(tmp_path: Path) -> None:
    """Two ONNX Runtime runs: the original and a copy with other weights, recognized and
    judged; agreement is what counting argmaxes by hand gives."""
    original = classifier_model(tmp_path / "a.onnx", seed=0)
    variant = classifier_model(tmp_path / "b.onnx", seed=0)
    other = classifier_model(tmp_path / "c.onnx", seed=5)
    x = np.random.default_rng(3).standard_normal((64, 4)).astype(np.float32)
    info, recognition = recognize_task(model_facts(original)) or (None, None)
    assert info is not None and recognition is not None
    run = {
        p: ort.InferenceSession(str(p)).run(None, {"x": x})[0] for p in (original, variant, other)
    }

    def score(candidate: Path) -> dict[str, float]:
        tally = info.create().tally(recognition)
        tally.add({"logits": run[original]}, {"logits": run[candidate]}, first_sample=0)
        return tally.score().metrics

    expected = np.mean(run[original].argmax(1) == run[other].argmax(1))
    assert score(variant)["top1_agreement"] == 1.0
    assert score(other)["top1_agreement"] == pytest.approx(expected)
    assert expected < 1.0


# CTC text ------------------------------------------------------------------------------------

CHARSET = list("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
CLASSES = len(CHARSET) + 2  # the blank first, a space after


def ctc_scores(texts: list[str], steps: int = 16) -> np.ndarray:
    """One-hot scores [N, T, C] that greedy decoding reads as `texts` (a blank between repeats)."""
    scores = np.zeros((len(texts), steps, CLASSES), dtype=np.float32)
    for row, text in enumerate(texts):
        ids: list[int] = []
        for char in text:
            index = CHARSET.index(char) + 1 if char != " " else CLASSES - 1
            ids += [0, index] if ids and ids[-1] == index else [index, index]
        ids += [0] * (steps - len(ids))
        scores[row, np.arange(steps), ids] = 1.0
    return scores


def ctc(texts: list[str], candidate: list[str], labels=None, vocabulary=CHARSET, batches=1):
    recognition = Recognition(task="ctc_text", reason="t", outputs=["p"], vocabulary=vocabulary)
    tally = evaluators.get("ctc_text").create().tally(recognition, labels)
    ref, cand = ctc_scores(texts), ctc_scores(candidate)
    for part in np.array_split(np.arange(len(texts)), batches):
        tally.add({"p": ref[part]}, {"p": cand[part]}, first_sample=int(part[0]))
    return tally.score()


def test_greedy_decoding_collapses_repeats_then_drops_blanks() -> None:
    assert greedy_decode(np.array([0, 3, 3, 0, 3, 5, 5, 0])) == [3, 3, 5]
    assert greedy_decode(np.array([], dtype=np.int64)) == []


def test_edit_distance() -> None:
    assert edit_distance("KITTEN", "SITTING") == 3
    assert edit_distance("", "ABC") == 3
    assert edit_distance([1, 2], [1, 2]) == 0


def test_a_changed_string_is_read_and_counted() -> None:
    score = ctc(["HELLO", "WORLD", "OCR"], ["HELLO", "WORD", "OCR"], batches=2)

    assert score.metrics["string_agreement"] == pytest.approx(2 / 3)
    assert score.metrics["cer"] == pytest.approx(1 / 13)
    assert [(w.sample, w.reference, w.candidate) for w in score.worst] == [(1, "WORLD", "WORD")]
    assert score.worst[0].severity == pytest.approx(1 / 5)


def test_spaces_and_repeats_decode() -> None:
    score = ctc(["AA B"], ["AA B"])

    assert score.metrics["string_agreement"] == 1.0
    assert score.worst == []


def test_label_strings_give_each_models_accuracy() -> None:
    score = ctc(["HELLO", "WORLD"], ["HELLO", "WORD"], labels=["HELLO", "WORLD"])

    assert score.metrics["accuracy_reference"] == 1.0
    assert score.metrics["accuracy_candidate"] == 0.5
    assert score.metrics["accuracy_drop"] == 0.5
    assert score.metrics["cer_reference"] == 0.0
    assert score.metrics["cer_candidate"] == pytest.approx(1 / 10)
    assert score.worst[0].label == "WORLD"


def test_without_a_charset_strings_and_labels_are_class_ids() -> None:
    score = ctc(["AB", "C"], ["AB", "D"], labels=["1 2", "3"], vocabulary=None)

    assert score.worst[0].reference == "3" and score.worst[0].candidate == "4"
    assert score.metrics["accuracy_candidate"] == 0.5
    with pytest.raises(DataMismatch, match="not a list of class ids"):
        ctc(["AB"], ["AB"], labels=["AB"], vocabulary=None)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("l.txt", "HELLO\nWORLD\n"),
        ("l.json", '["HELLO", "WORLD"]'),
        ("l.csv", "label\nHELLO\nWORLD\n"),
    ],
    ids=["txt", "json", "csv"],
)
def test_label_strings_are_read_from_files(tmp_path: Path, name: str, text: str) -> None:
    (tmp_path / name).write_text(text, encoding="utf-8")

    labels = evaluators.get("ctc_text").create().read_labels(tmp_path / name, samples=2)

    assert labels == ["HELLO", "WORLD"]


def test_label_files_of_the_wrong_length_are_refused(tmp_path: Path) -> None:
    (tmp_path / "l.json").write_text('["A"]', encoding="utf-8")

    with pytest.raises(DataMismatch, match="1 entries but the data has 2"):
        evaluators.get("ctc_text").create().read_labels(tmp_path / "l.json", samples=2)


# embeddings ----------------------------------------------------------------------------------


def brute_recall(ref: np.ndarray, cand: np.ndarray, k: int, margin: float = 0.05) -> float:
    """Recall@k by sorting, a neighbour of the original lost only when the variant misses it
    and it stood at least `margin` above the original's (k+1)-th neighbour."""

    def ranked(vectors: np.ndarray, i: int) -> tuple[list[int], np.ndarray]:
        unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        similarity = unit @ unit[i]
        return [j for j in np.argsort(-similarity) if j != i], similarity

    shares = []
    for i in range(len(ref)):
        order, similarity = ranked(ref, i)
        found = set(ranked(cand, i)[0][:k])
        boundary = similarity[order[k]] if len(order) > k else -np.inf
        lost = [j for j in order[:k] if j not in found and similarity[j] - boundary >= margin]
        shares.append(1 - len(lost) / k)
    return float(np.mean(shares))


def test_embeddings_with_one_swapped_pair_lose_neighbours() -> None:
    ref = np.random.default_rng(0).standard_normal((40, 8))
    cand = ref.copy()
    cand[[3, 17]] = cand[[17, 3]]

    score = judge("embedding", ["e"], {"e": ref}, {"e": cand}, batches=3)

    swapped = float(ref[3] @ ref[17] / np.linalg.norm(ref[3]) / np.linalg.norm(ref[17]))
    assert score.metrics["min_cosine"] == pytest.approx(swapped)
    assert score.metrics["mean_cosine"] == pytest.approx((38 + 2 * swapped) / 40)
    assert score.metrics["recall_at_10"] == pytest.approx(brute_recall(ref, cand, 10))
    assert score.metrics["recall_at_10"] < 1.0
    assert {entry.sample for entry in score.worst[:2]} == {3, 17}
    assert score.worst[0].reference.startswith("nearest ")


def test_a_near_tie_at_the_boundary_is_not_a_lost_neighbour() -> None:
    """Sample 0's 10th and 11th neighbours differ by 0.001 in cosine: a variant that swaps
    them retrieves what a search would show; one that drops its nearest has lost it."""
    rng = np.random.default_rng(5)
    ref = rng.standard_normal((30, 16))
    ref[0] = 0.0
    ref[0, 0] = 1.0
    order = np.argsort(-(ref / np.linalg.norm(ref, axis=1, keepdims=True))[:, 0])
    tenth, eleventh = [j for j in order if j != 0][9:11]
    swapped = ref.copy()
    swapped[[tenth, eleventh]] = swapped[[eleventh, tenth]]
    nearest_one = [j for j in order if j != 0][0]
    dropped = ref.copy()
    dropped[nearest_one] *= -1.0

    ties = judge("embedding", ["e"], {"e": ref}, {"e": swapped})
    lost = judge("embedding", ["e"], {"e": ref}, {"e": dropped})

    assert ties.metrics["recall_at_10"] == pytest.approx(brute_recall(ref, swapped, 10))
    assert ties.metrics["recall_at_10"] > brute_recall(ref, swapped, 10, margin=0.0)
    assert lost.metrics["recall_at_10"] == pytest.approx(brute_recall(ref, dropped, 10))
    assert lost.metrics["recall_at_10"] < 1.0
    assert any("lost " in entry.candidate for entry in lost.worst)  # the drill-down names them


def test_identical_embeddings_retrieve_every_neighbour() -> None:
    ref = np.random.default_rng(1).standard_normal((30, 5))

    score = judge("embedding", ["e"], {"e": ref}, {"e": ref.copy()})

    assert score.metrics == pytest.approx(
        {"mean_cosine": 1.0, "min_cosine": 1.0, "recall_at_10": 1.0}
    )
    assert score.worst == []


def test_few_samples_measure_recall_at_a_smaller_k() -> None:
    ref = np.random.default_rng(2).standard_normal((6, 4))
    cand = ref + np.random.default_rng(3).standard_normal((6, 4)) * 0.5

    score = judge("embedding", ["e"], {"e": ref}, {"e": cand})

    assert score.metrics["recall_at_10"] == pytest.approx(brute_recall(ref, cand, 5))
    assert "recall_at_5" in score.note


def test_nearest_matches_a_plain_sort() -> None:
    vectors = np.random.default_rng(4).standard_normal((25, 6))
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    found = nearest(vectors, 4)

    for i in range(25):
        order = [j for j in np.argsort(-(unit @ unit[i])) if j != i]
        assert found[i].tolist() == order[:4]


def test_embeddings_take_no_labels(tmp_path: Path) -> None:
    with pytest.raises(DataMismatch, match="labels are not used"):
        evaluators.get("embedding").create().read_labels(tmp_path / "x.npy", samples=1)


# regression ----------------------------------------------------------------------------------


def test_a_regressor_off_by_five_percent() -> None:
    ref = np.array([[1.0], [2.0], [4.0], [-8.0]])
    cand = ref * 1.05
    cand[3] = -8.0  # one sample exact

    score = judge("regression", ["v"], {"v": ref}, {"v": cand}, batches=2)

    assert score.metrics["mean_relative_error"] == pytest.approx(0.05 * 3 / 4)
    assert score.metrics["max_relative_error"] == pytest.approx(0.05)
    assert {entry.sample for entry in score.worst} == {0, 1, 2}
    assert "1.05 (5.00% off)" in {entry.candidate for entry in score.worst}


def test_regression_against_labels_and_broken_values() -> None:
    ref = np.array([1.0, 2.0])
    labels = np.array([1.5, 2.0])

    score = judge("regression", ["v"], {"v": ref}, {"v": np.array([1.0, 3.0])}, labels)
    broken = judge("regression", ["v"], {"v": ref}, {"v": np.array([1.0, np.nan])})

    assert score.metrics["mae_reference"] == pytest.approx(0.25)
    assert score.metrics["mae_candidate"] == pytest.approx(0.75)
    assert score.metrics["mae_increase"] == pytest.approx(0.5)
    assert broken.metrics["max_relative_error"] == 1.0
    assert broken.metrics["mean_relative_error"] == 0.5
    assert "1 NaN/Inf values" in broken.note
    assert broken.model_validate_json(broken.model_dump_json()) == broken  # stores as JSON


# shared --------------------------------------------------------------------------------------


def test_worst_samples_keep_only_the_worst() -> None:
    worst = WorstSamples(keep=3)
    made: list[int] = []

    for sample, severity in enumerate([0.5, 0.9, 0.0, 0.7, 0.2, 0.1]):

        def make(sample: int = sample, severity: float = severity) -> Disagreement:
            made.append(sample)
            return Disagreement(sample=sample, reference="r", candidate="c", severity=severity)

        worst.offer(severity, make)

    assert [entry.sample for entry in worst.worst_first()] == [1, 3, 0]
    assert made == [0, 1, 3]  # the others were never written out: not among the worst


def test_an_empty_tally_is_refused() -> None:
    recognition = Recognition(task="regression", reason="t", outputs=["v"])
    with pytest.raises(DataMismatch, match="empty"):
        evaluators.get("regression").create().tally(recognition).score()


def test_a_broken_row_is_a_flip_and_says_so() -> None:
    candidate = SCORES.copy()
    candidate[1, 4] = np.nan  # argmax of a row with NaN is the NaN

    score = judge("classification", ["p"], {"p": SCORES}, {"p": candidate})

    assert score.metrics["top1_agreement"] == pytest.approx(0.75)
    assert score.worst[0].candidate == "class 4 (NaN/Inf in the row)"
    assert score.model_validate_json(score.model_dump_json()) == score


def test_a_ctc_task_set_by_the_user_reads_the_charset(tmp_path: Path) -> None:
    path = ctc_model(tmp_path / "m.onnx", classes=4, metadata={"character": "a\nb"})

    found = recognize_task(model_facts(path), task="ctc_text")

    assert found is not None
    assert found[1].chosen_by == "user"
    assert found[1].vocabulary == ["a", "b"]
