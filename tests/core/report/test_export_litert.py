"""The export bundle's litert/ part: the reason it was skipped when the converter is missing
(simulated, so this runs with or without the extra), and with the extra the .tflite files."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from optistudio.core.backends import SessionOptions, get_backend, litert_convert
from optistudio.core.model.intake import inspect_model
from optistudio.core.report import litert as litert_part
from optistudio.core.report.bundle import BundleSource, verify_bundle, write_bundle

MISSING = litert_convert.missing_converter()


def bundle_of(model: Path, out: Path, **kwargs: object) -> tuple[Path, dict[str, str]]:
    source = BundleSource(
        name="tiny",
        model_path=model,
        info=inspect_model(model),
        coreml_precisions=[],
        **kwargs,  # type: ignore[arg-type]
    )
    report = write_bundle(source, out)
    return report.path, report.skipped


def read_json(bundle: Path, member: str) -> dict:
    with zipfile.ZipFile(bundle) as z:
        return json.loads(z.read(member))


def test_without_the_converter_the_part_is_skipped_with_the_extra_to_install(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(litert_part, "missing_converter", lambda: "onnx2tf missing")

    bundle, skipped = bundle_of(tiny_model, tmp_path / "b.zip", litert_precisions=["fp32", "fp16"])

    assert skipped["litert"] == (
        "No LiteRT FP32, FP16 file: onnx2tf missing on this worker: "
        "pip install 'optistudio[litert]'."
    )
    with zipfile.ZipFile(bundle) as z:
        assert not [m for m in z.namelist() if m.startswith("litert/")]
    pipeline = read_json(bundle, "pipeline.json")
    assert pipeline["litert"]["files"] == {}
    assert "LiteRT" in pipeline["runs_on"]["litert"]
    assert read_json(bundle, "manifest.json")["skipped"]["litert"] == skipped["litert"]


def test_a_library_bundle_asks_for_no_litert_files(tiny_model: Path, tmp_path: Path) -> None:
    bundle, skipped = bundle_of(tiny_model, tmp_path / "b.zip")

    assert "litert" not in skipped
    assert read_json(bundle, "pipeline.json")["litert"]["files"] == {}


@pytest.mark.extras
@pytest.mark.skipif(MISSING is not None, reason=f"needs the litert extra: {MISSING}")
def test_with_the_extra_the_bundle_holds_a_tflite_per_precision(
    tiny_model: Path, tmp_path: Path
) -> None:
    bundle, skipped = bundle_of(
        tiny_model, tmp_path / "b.zip", litert_precisions=list(litert_part.PRECISIONS)
    )

    files = read_json(bundle, "pipeline.json")["litert"]["files"]
    assert files == {p: f"litert/tiny_{p}.tflite" for p in litert_part.PRECISIONS}
    assert "litert" not in skipped
    assert verify_bundle(bundle) == []
    with zipfile.ZipFile(bundle) as z:
        z.extract(files["fp32"], tmp_path)
    feeds = {"x": np.ones((2, 16), np.float32)}
    got = get_backend("litert").load(tmp_path / files["fp32"], SessionOptions()).run(feeds)
    want = get_backend("onnxruntime").load(tiny_model, SessionOptions()).run(feeds)
    np.testing.assert_allclose(got[0], want[0], atol=1e-4)
