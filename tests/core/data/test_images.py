"""Image datasets: exact preprocessing math, folder and zip sources, refusals that name the problem."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from io import BytesIO
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pydantic import ValidationError

from optistudio.core.data.datasets import NpzDataset, load_labels, open_dataset
from optistudio.core.data.images import ImageDataset, ImagePreprocessing
from optistudio.core.errors import DataMismatch
from optistudio.core.model.info import TensorSpec

NCHW = TensorSpec(name="pixels", dtype="float32", shape=["batch", 3, "height", "width"])
NHWC = TensorSpec(name="pixels", dtype="float32", shape=["batch", "height", "width", 3])
GRAY_NCHW = TensorSpec(name="pixels", dtype="float32", shape=["batch", 1, "height", "width"])

# A 2x2 RGB image; rows are [top, bottom], each pixel [R, G, B].
PIXELS_2X2 = np.array(
    [[[10, 20, 30], [40, 50, 60]], [[70, 80, 90], [255, 0, 128]]],
    dtype=np.uint8,
)


def save_image(path: Path, pixels: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path)
    return path


def noise(height: int, width: int, seed: int, channels: int = 3) -> np.ndarray:
    shape = (height, width, channels) if channels > 1 else (height, width)
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def image_folder(root: Path, count: int, *, size: tuple[int, int] = (10, 12)) -> Path:
    for index in range(count):
        save_image(root / f"img{index:02d}.png", noise(*size, seed=index))
    return root


def png_bytes(pixels: np.ndarray) -> bytes:
    buffer = BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def one_image(tmp_path: Path, pixels: np.ndarray = PIXELS_2X2) -> Path:
    save_image(tmp_path / "images" / "only.png", pixels)
    return tmp_path / "images"


def only_batch(dataset: ImageDataset) -> np.ndarray:
    (batch,) = list(dataset.batches())
    return batch["pixels"]


@pytest.mark.parametrize(
    ("color", "layout", "channel_order"),
    [
        pytest.param("RGB", "NCHW", [0, 1, 2], id="rgb-nchw"),
        pytest.param("RGB", "NHWC", [0, 1, 2], id="rgb-nhwc"),
        pytest.param("BGR", "NCHW", [2, 1, 0], id="bgr-nchw"),
        pytest.param("BGR", "NHWC", [2, 1, 0], id="bgr-nhwc"),
    ],
)
def test_pixel_math_scale_mean_std_layout_and_channel_order(
    tmp_path: Path, color: str, layout: str, channel_order: list[int]
) -> None:
    pre = ImagePreprocessing.model_validate(
        {
            "size": (2, 2),
            "layout": layout,
            "color": color,
            "scale": 1 / 255,
            "mean": (0.5, 0.25, 0.125),
            "std": (0.5, 0.25, 2.0),
        }
    )
    spec = NCHW if layout == "NCHW" else NHWC

    values = only_batch(ImageDataset(one_image(tmp_path), [spec], pre))

    hwc = PIXELS_2X2[:, :, channel_order].astype(np.float64) / 255
    expected = (hwc - np.array(pre.mean)) / np.array(pre.std)
    expected = expected.transpose(2, 0, 1) if layout == "NCHW" else expected
    assert values.dtype == np.float32
    np.testing.assert_allclose(values[0], expected, rtol=1e-6, atol=1e-6)
    # bottom-right pixel (255, 0, 128): its first channel is R=255 for RGB, B=128 for BGR
    first = values[0, 0, 1, 1] if layout == "NCHW" else values[0, 1, 1, 0]
    expected_first = (1.0 - 0.5) / 0.5 if color == "RGB" else (128 / 255 - 0.5) / 0.5
    assert first == pytest.approx(expected_first, abs=1e-6)


def test_gray_gives_one_channel_with_one_value_defaults(tmp_path: Path) -> None:
    gray = np.array([[0, 51], [102, 255]], dtype=np.uint8)
    pre = ImagePreprocessing(size=(2, 2), color="GRAY")

    values = only_batch(ImageDataset(one_image(tmp_path, gray), [GRAY_NCHW], pre))

    assert (pre.mean, pre.std) == ((0.0,), (1.0,))
    np.testing.assert_allclose(values, (gray / 255)[None, None], rtol=1e-6)


def test_rgb_image_is_converted_to_gray_for_a_gray_model(tmp_path: Path) -> None:
    pre = ImagePreprocessing(size=(2, 2), color="GRAY", scale=1.0)

    values = only_batch(ImageDataset(one_image(tmp_path), [GRAY_NCHW], pre))

    expected = np.asarray(Image.fromarray(PIXELS_2X2).convert("L"), dtype=np.float32)
    np.testing.assert_array_equal(values[0, 0], expected)


def test_integer_dtype_keeps_raw_pixels(tmp_path: Path) -> None:
    spec = TensorSpec(name="pixels", dtype="uint8", shape=[1, 2, 2, 3])
    pre = ImagePreprocessing(layout="NHWC", scale=1.0, dtype="uint8")

    values = only_batch(ImageDataset(one_image(tmp_path), [spec], pre))

    assert values.dtype == np.uint8
    np.testing.assert_array_equal(values[0], PIXELS_2X2)


@pytest.mark.parametrize(
    ("spec", "layout", "shape"),
    [
        pytest.param(NCHW, "NCHW", (1, 3, 5, 6), id="nchw"),
        pytest.param(NHWC, "NHWC", (1, 5, 6, 3), id="nhwc"),
    ],
)
def test_stretch_resizes_any_image_to_the_declared_size(
    tmp_path: Path, spec: TensorSpec, layout: str, shape: tuple[int, ...]
) -> None:
    folder = image_folder(tmp_path / "images", 1, size=(10, 12))
    pre = ImagePreprocessing.model_validate({"size": (5, 6), "layout": layout})

    values = only_batch(ImageDataset(folder, [spec], pre))

    assert values.shape == shape


@pytest.mark.parametrize(
    ("pixels", "expected"),
    [
        # 2x4 (H x W): already covers 2x2, so the middle two columns are kept as they are
        pytest.param(
            np.array([[[0] * 3, [1] * 3, [2] * 3, [3] * 3]] * 2, dtype=np.uint8),
            np.array([[1, 2], [1, 2]]),
            id="wide-no-scaling",
        ),
        pytest.param(
            np.array([[[row] * 3] * 2 for row in range(4)], dtype=np.uint8),
            np.array([[1, 1], [2, 2]]),
            id="tall-no-scaling",
        ),
    ],
)
def test_center_crop_keeps_the_middle(
    tmp_path: Path, pixels: np.ndarray, expected: np.ndarray
) -> None:
    pre = ImagePreprocessing(size=(2, 2), resize="shorter_side_then_center_crop", scale=1.0)

    values = only_batch(ImageDataset(one_image(tmp_path, pixels), [NCHW], pre))

    np.testing.assert_array_equal(values[0, 0], expected)


def test_center_crop_scales_the_shorter_side_then_cuts(tmp_path: Path) -> None:
    # 4x12 -> scale 1/2 -> 2x6 -> columns 2..3; these only see source columns 3..8 (bright).
    pixels = np.zeros((4, 12, 3), dtype=np.uint8)
    pixels[:, 3:9] = 200
    folder = one_image(tmp_path, pixels)
    crop = ImagePreprocessing(size=(2, 2), resize="shorter_side_then_center_crop", scale=1.0)
    stretch = ImagePreprocessing(size=(2, 2), scale=1.0)

    cropped = only_batch(ImageDataset(folder, [NCHW], crop))
    stretched = only_batch(ImageDataset(folder, [NCHW], stretch))

    np.testing.assert_array_equal(cropped, np.full((1, 3, 2, 2), 200, dtype=np.float32))
    assert (stretched < 200).all()


def test_batches_stream_in_sorted_order_and_start_over(tmp_path: Path) -> None:
    folder = image_folder(tmp_path / "images", 7, size=(4, 5))
    pre = ImagePreprocessing(size=(4, 5), scale=1.0)

    dataset = ImageDataset(folder, [NCHW], pre, batch_size=3)
    batches = [batch["pixels"] for batch in dataset.batches()]

    assert len(dataset) == 7
    assert [batch.shape for batch in batches] == [(3, 3, 4, 5), (3, 3, 4, 5), (1, 3, 4, 5)]
    assert dataset.names() == [f"img{index:02d}.png" for index in range(7)]
    np.testing.assert_array_equal(batches[2][0], noise(4, 5, seed=6).transpose(2, 0, 1))
    assert [len(list(dataset.batches())) for _ in range(2)] == [3, 3]


def test_images_are_decoded_one_batch_at_a_time(tmp_path: Path) -> None:
    folder = image_folder(tmp_path / "images", 6, size=(4, 5))
    whole = png_bytes(noise(40, 50, seed=9))
    (folder / "img99.png").write_bytes(whole[: len(whole) // 2])  # header fine, data cut
    dataset = ImageDataset(folder, [NCHW], ImagePreprocessing(size=(4, 5)), batch_size=3)

    stream = dataset.batches()
    first_two = [next(stream), next(stream)]

    assert [batch["pixels"].shape[0] for batch in first_two] == [3, 3]
    with pytest.raises(DataMismatch, match="img99.png"):
        next(stream)


def test_zip_reads_like_the_folder_and_skips_junk(tmp_path: Path) -> None:
    folder = image_folder(tmp_path / "images", 3, size=(4, 5))
    save_image(folder / "sub" / "img10.png", noise(4, 5, seed=10))
    archive = tmp_path / "images.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zipped:
        zipped.writestr("images/", b"")
        for path in sorted(folder.rglob("*.png")):
            zipped.write(path, f"images/{path.relative_to(folder).as_posix()}")
        zipped.writestr("__MACOSX/images/._img00.png", b"resource fork, not a png")
        zipped.writestr("images/.hidden.png", b"not a png either")
        zipped.writestr("images/readme.txt", b"labels follow the sorted file names")
    pre = ImagePreprocessing(size=(4, 5))

    from_zip = ImageDataset(archive, [NCHW], pre, batch_size=2)
    from_folder = ImageDataset(folder, [NCHW], pre, batch_size=2)

    assert from_zip.names() == [
        "images/img00.png",
        "images/img01.png",
        "images/img02.png",
        "images/sub/img10.png",
    ]
    assert from_folder.names() == [name.removeprefix("images/") for name in from_zip.names()]
    for zipped_batch, folder_batch in zip(from_zip.batches(), from_folder.batches(), strict=True):
        np.testing.assert_array_equal(zipped_batch["pixels"], folder_batch["pixels"])


def test_labels_follow_the_file_order(tmp_path: Path) -> None:
    folder = tmp_path / "images"
    for name in ("b.png", "a.png", "c.png"):
        save_image(folder / name, noise(2, 2, seed=0))
    (tmp_path / "labels.csv").write_text("label\n4\n5\n6\n")

    dataset = ImageDataset(folder, [NCHW], ImagePreprocessing(size=(2, 2)))
    labels = load_labels(tmp_path / "labels.csv", samples=len(dataset))

    assert dict(zip(dataset.names(), labels.tolist(), strict=True)) == {
        "a.png": 4,
        "b.png": 5,
        "c.png": 6,
    }


@pytest.mark.parametrize(
    "member",
    ["../evil.png", "/etc/evil.png", "images/../../evil.png", "C:/evil.png"],
    ids=["parent", "absolute", "nested-parent", "drive"],
)
def test_zip_slip_members_are_refused(tmp_path: Path, member: str) -> None:
    archive = tmp_path / "images.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("ok.png", png_bytes(PIXELS_2X2))
        zipped.writestr(member, png_bytes(PIXELS_2X2))

    with pytest.raises(DataMismatch, match="absolute path or one with '..'") as caught:
        ImageDataset(archive, [NCHW], ImagePreprocessing(size=(2, 2)))

    assert member in caught.value.message


@pytest.mark.parametrize("container", ["folder", "zip"])
def test_a_file_that_is_not_an_image_is_refused_by_name(tmp_path: Path, container: str) -> None:
    folder = one_image(tmp_path)
    (folder / "broken.jpg").write_bytes(b"this is not a jpeg")
    source = folder
    if container == "zip":
        source = tmp_path / "images.zip"
        with zipfile.ZipFile(source, "w") as zipped:
            for path in folder.iterdir():
                zipped.write(path, path.name)

    with pytest.raises(DataMismatch, match="'broken.jpg'"):
        ImageDataset(source, [NCHW], ImagePreprocessing(size=(2, 2)))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(lambda root: root.mkdir(), "No images found in 'source'", id="empty-folder"),
        pytest.param(
            lambda root: (root.mkdir(), (root / "notes.txt").write_text("x")),
            "No images found in 'source'",
            id="no-image-files",
        ),
        pytest.param(lambda root: None, "'source' does not exist", id="missing"),
        pytest.param(
            lambda root: root.write_text("x"), "neither a folder nor a .zip", id="plain-file"
        ),
    ],
)
def test_sources_without_images_are_refused(
    tmp_path: Path, make: Callable[[Path], object], message: str
) -> None:
    root = tmp_path / "source"
    make(root)

    with pytest.raises(DataMismatch, match=message):
        ImageDataset(root, [NCHW], ImagePreprocessing(size=(2, 2)))


def test_empty_zip_and_bad_zip_are_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.zip"
    zipfile.ZipFile(empty, "w").close()
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip")

    with pytest.raises(DataMismatch, match="No images found in 'empty.zip'"):
        ImageDataset(empty, [NCHW], ImagePreprocessing(size=(2, 2)))
    with pytest.raises(DataMismatch, match="'bad.zip' is not a readable .zip"):
        ImageDataset(bad, [NCHW], ImagePreprocessing(size=(2, 2)))


@pytest.mark.parametrize(
    ("spec", "options", "message", "hint"),
    [
        pytest.param(NCHW, {"color": "GRAY"}, "expects 3 channel", "'RGB' or 'BGR'", id="gray-3"),
        pytest.param(GRAY_NCHW, {"color": "RGB"}, "expects 1 channel", "'GRAY'", id="rgb-1"),
        pytest.param(
            TensorSpec(name="pixels", dtype="float32", shape=[1, 224, 224, 3]),
            {},
            "expects 224 channel",
            "layout 'NHWC'",
            id="layout",
        ),
    ],
)
def test_channel_mismatch_names_the_input_and_the_fix(
    tmp_path: Path, spec: TensorSpec, options: dict[str, str], message: str, hint: str
) -> None:
    pre = ImagePreprocessing.model_validate({"size": (2, 2), **options})

    with pytest.raises(DataMismatch, match=message) as caught:
        ImageDataset(one_image(tmp_path), [spec], pre)

    assert "'pixels'" in caught.value.message
    assert hint in (caught.value.hint or "")


def test_size_is_taken_from_a_fixed_model_input(tmp_path: Path) -> None:
    spec = TensorSpec(name="pixels", dtype="float32", shape=["batch", 3, 4, 5])
    folder = image_folder(tmp_path / "images", 1, size=(10, 12))

    dataset = ImageDataset(folder, [spec], ImagePreprocessing())

    assert dataset.size == (4, 5)
    assert only_batch(dataset).shape == (1, 3, 4, 5)
    assert "1 images from images, resized to 4x5, NCHW RGB" in dataset.description
    assert "mean (0, 0, 0) std (1, 1, 1)" in dataset.description


@pytest.mark.parametrize(
    ("spec", "pre", "message"),
    [
        pytest.param(NCHW, ImagePreprocessing(), "dynamic height or width", id="no-size"),
        pytest.param(
            TensorSpec(name="pixels", dtype="float32", shape=["batch", 3, 4, 5]),
            ImagePreprocessing(size=(4, 6)),
            "resizes to 4x6",
            id="size-differs",
        ),
        pytest.param(
            TensorSpec(name="pixels", dtype="float16", shape=["batch", 3, "h", "w"]),
            ImagePreprocessing(size=(2, 2)),
            "expects dtype float16",
            id="dtype",
        ),
        pytest.param(
            TensorSpec(name="pixels", dtype="float32", shape=[4, 3, "h", "w"]),
            ImagePreprocessing(size=(2, 2)),
            "holds 1 sample\\(s\\), but this model runs 4 at a time",
            id="fixed-batch",
        ),
    ],
)
def test_preprocessing_that_does_not_fit_the_model_is_refused(
    tmp_path: Path, spec: TensorSpec, pre: ImagePreprocessing, message: str
) -> None:
    with pytest.raises(DataMismatch, match=message):
        ImageDataset(one_image(tmp_path), [spec], pre)


@pytest.mark.parametrize(
    "inputs",
    [
        pytest.param([NCHW, TensorSpec(name="scale", dtype="float32", shape=[1, 2])], id="two"),
        pytest.param([TensorSpec(name="tokens", dtype="int64", shape=["b", "seq"])], id="rank-2"),
    ],
)
def test_models_without_one_image_input_are_refused(
    tmp_path: Path, inputs: list[TensorSpec]
) -> None:
    with pytest.raises(DataMismatch, match="exactly one input of rank 4") as caught:
        ImageDataset(one_image(tmp_path), inputs, ImagePreprocessing(size=(2, 2)))

    assert all(repr(spec.name) in caught.value.message for spec in inputs)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        pytest.param({"mean": (0.5,)}, "mean has 1 value", id="mean-length"),
        pytest.param({"color": "GRAY", "std": (1, 1, 1)}, "std has 3 value", id="gray-std"),
        pytest.param({"std": (1, 0, 1)}, "non-zero", id="zero-std"),
        pytest.param({"size": (0, 4)}, "at least 1", id="size"),
        pytest.param({"dtype": "bool"}, "float or integer", id="dtype"),
        pytest.param({"crop": True}, "crop", id="extra-field"),
    ],
)
def test_preprocessing_validation_names_the_field(options: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        ImagePreprocessing.model_validate(options)


def test_every_preprocessing_field_is_described() -> None:
    properties = ImagePreprocessing.model_json_schema()["properties"]

    assert set(properties) == set(ImagePreprocessing.model_fields)
    assert all(prop.get("description") for prop in properties.values())


def test_open_dataset_dispatches_on_the_path(tmp_path: Path) -> None:
    npz = tmp_path / "data.npz"
    np.savez(npz, pixels=np.zeros((2, 3, 2, 2), np.float32))
    folder = one_image(tmp_path)
    archive = tmp_path / "images.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.write(folder / "only.png", "only.png")
    pre = ImagePreprocessing(size=(2, 2))

    assert isinstance(open_dataset(npz, [NCHW]), NpzDataset)
    assert isinstance(open_dataset(folder, [NCHW], preprocessing=pre), ImageDataset)
    assert len(open_dataset(archive, [NCHW], batch_size=2, preprocessing=pre)) == 1
    with pytest.raises(DataMismatch, match="holds arrays, not images"):
        open_dataset(npz, [NCHW], preprocessing=pre)
    with pytest.raises(DataMismatch, match="'notes.txt' is not a dataset"):
        open_dataset(tmp_path / "notes.txt", [NCHW])
