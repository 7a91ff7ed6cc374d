"""Datasets: .npz validation names the problem, batches stream, labels load from .npy and CSV."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from optistudio.core.data.datasets import NpzDataset, SyntheticDataset, load_labels
from optistudio.core.errors import DataMismatch
from optistudio.core.model.info import TensorSpec

IMAGE = TensorSpec(name="image", dtype="float32", shape=["batch", 3, 4])
MASK = TensorSpec(name="mask", dtype="int64", shape=["batch", "sequence"])


def save_npz(path: Path, *, compressed: bool = False, **arrays: np.ndarray) -> Path:
    (np.savez_compressed if compressed else np.savez)(path, **arrays)
    return path


def images(samples: int) -> np.ndarray:
    return np.arange(samples * 12, dtype=np.float32).reshape(samples, 3, 4)


@pytest.mark.parametrize("compressed", [False, True], ids=["stored", "deflated"])
def test_npz_batches_stream_rows_in_order(tmp_path: Path, compressed: bool) -> None:
    data = images(5)
    masks = np.arange(5 * 7).reshape(5, 7)
    path = save_npz(tmp_path / "d.npz", compressed=compressed, image=data, mask=masks)

    dataset = NpzDataset(path, [IMAGE, MASK], batch_size=2)
    batches = list(dataset.batches())

    assert len(dataset) == 5
    assert [batch["image"].shape for batch in batches] == [(2, 3, 4), (2, 3, 4), (1, 3, 4)]
    np.testing.assert_array_equal(np.concatenate([b["image"] for b in batches]), data)
    np.testing.assert_array_equal(np.concatenate([b["mask"] for b in batches]), masks)
    assert [len(list(dataset.batches())) for _ in range(2)] == [3, 3]  # starts over
    assert "5 samples" in dataset.description and "d.npz" in dataset.description


def test_npz_fortran_ordered_array_still_reads(tmp_path: Path) -> None:
    data = np.asfortranarray(images(3))
    path = save_npz(tmp_path / "f.npz", image=data)

    batches = list(NpzDataset(path, [IMAGE]).batches())

    np.testing.assert_array_equal(np.concatenate([b["image"] for b in batches]), data)


@pytest.mark.parametrize(
    ("arrays", "expected"),
    [
        pytest.param(
            {"mask": np.zeros((2, 7), np.int64)}, "no array for input(s) ['image']", id="missing"
        ),
        pytest.param(
            {"image": images(2), "mask": np.zeros((2, 7), np.int64), "extra": np.zeros(2)},
            "array(s) ['extra'] that are not model inputs",
            id="extra",
        ),
        pytest.param(
            {"image": images(2).astype(np.float64), "mask": np.zeros((2, 7), np.int64)},
            "expects dtype float32 but the data is float64",
            id="dtype",
        ),
        pytest.param(
            {"image": np.zeros((2, 3, 5), np.float32), "mask": np.zeros((2, 7), np.int64)},
            "expects shape ['samples', 3, 4] but the data has shape [2, 3, 5]",
            id="fixed-dim",
        ),
        pytest.param(
            {"image": np.zeros((2, 12), np.float32), "mask": np.zeros((2, 7), np.int64)},
            "but the data has shape [2, 12]",
            id="rank",
        ),
        pytest.param(
            {"image": images(3), "mask": np.zeros((2, 7), np.int64)},
            "different sample counts: {'image': 3, 'mask': 2}",
            id="counts",
        ),
        pytest.param(
            {"image": images(0), "mask": np.zeros((0, 7), np.int64)},
            "the dataset is empty",
            id="empty",
        ),
    ],
)
def test_npz_mismatch_names_the_problem(
    tmp_path: Path, arrays: dict[str, np.ndarray], expected: str
) -> None:
    path = save_npz(tmp_path / "bad.npz", **arrays)

    with pytest.raises(DataMismatch) as error:
        NpzDataset(path, [IMAGE, MASK])

    assert expected.lower() in str(error.value).lower()


def test_npz_rejects_pickled_objects_and_non_npz(tmp_path: Path) -> None:
    objects = save_npz(tmp_path / "o.npz", image=np.array([{"a": 1}], dtype=object))
    text = tmp_path / "t.npz"
    text.write_text("not a zip")

    with pytest.raises(DataMismatch, match="Python objects"):
        NpzDataset(objects, [IMAGE])
    with pytest.raises(DataMismatch, match="not a readable .npz"):
        NpzDataset(text, [IMAGE])


def test_fixed_batch_refuses_another_batch_size(tmp_path: Path) -> None:
    fixed = TensorSpec(name="image", dtype="float32", shape=[1, 3, 4])
    path = save_npz(tmp_path / "d.npz", image=images(4))

    with pytest.raises(DataMismatch, match="fixed batch of 1"):
        NpzDataset(path, [fixed], batch_size=2)
    assert [b["image"].shape for b in NpzDataset(path, [fixed]).batches()] == [(1, 3, 4)] * 4


def test_synthetic_dataset_streams_distinct_batches() -> None:
    dataset = SyntheticDataset([IMAGE, MASK], samples=5, batch_size=2, dims={"sequence": 7})

    batches = list(dataset.batches())

    assert len(dataset) == 5
    assert [b["image"].shape for b in batches] == [(2, 3, 4), (2, 3, 4), (1, 3, 4)]
    assert batches[0]["mask"].shape == (2, 7)
    assert not np.array_equal(batches[0]["image"], batches[1]["image"])
    np.testing.assert_array_equal(batches[0]["image"], next(dataset.batches())["image"])
    assert "synthetic" in dataset.description and dataset.synthetic
    assert dataset.warnings == []


def test_synthetic_dataset_warns_about_defaulted_dims() -> None:
    dataset = SyntheticDataset([MASK], samples=2)

    assert any("sequence" in warning for warning in dataset.warnings)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        pytest.param("l.csv", "3\n1\n0\n", id="plain"),
        pytest.param("l.csv", "id,label\n7,3\n8,1\n9,0\n", id="header"),
        pytest.param("l.csv", "Label\n3\n\n1\n0\n", id="header-blank-line"),
    ],
)
def test_labels_from_csv(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)

    labels = load_labels(path, samples=3)

    assert labels.tolist() == [3, 1, 0] and labels.dtype == np.int64


def test_labels_from_npy(tmp_path: Path) -> None:
    path = tmp_path / "l.npy"
    np.save(path, np.array([2, 0, 1], dtype=np.int32))

    assert load_labels(path, samples=3).tolist() == [2, 0, 1]


def test_labels_wrong_length(tmp_path: Path) -> None:
    path = tmp_path / "l.npy"
    np.save(path, np.zeros(90, dtype=np.int64))

    with pytest.raises(DataMismatch, match="labels have 90 entries but the dataset has 100"):
        load_labels(path, samples=100)


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        pytest.param("l.csv", "1\ncat\n", "not an integer", id="csv-word"),
        pytest.param("l.csv", "1\n2.5\n", "not an integer", id="csv-float"),
        pytest.param("l.csv", "id,class\n1,2\n", "no 'label' column", id="csv-no-label"),
        pytest.param("l.npy", np.array([1.0, 2.5]), "integer class ids", id="npy-float"),
        pytest.param("l.npy", np.zeros((2, 1), np.int64), "1-D", id="npy-2d"),
    ],
)
def test_labels_must_be_integers(
    tmp_path: Path, name: str, content: str | np.ndarray, expected: str
) -> None:
    path = tmp_path / name
    if isinstance(content, str):
        path.write_text(content)
    else:
        np.save(path, content)

    with pytest.raises(DataMismatch, match=expected):
        load_labels(path, samples=2)
