"""`optistudio export` as a user runs it: ids printed by `optimize --save`, a real bundle."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from test_cli import optimize_args, optistudio

from optistudio.core.report.bundle import verify_bundle


def test_export_a_variant_by_the_id_optimize_save_printed(tiny_model: Path, tmp_path: Path):
    data = tmp_path / "data"
    made = optistudio(
        *optimize_args(tiny_model, recipe="graph", seconds="0.1", out=tmp_path / "v",
                       as_json=True, save=True), data_dir=data,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    variant_id = json.loads(made.stdout)["variants"][0]["model_id"]

    done = optistudio(
        "export", str(variant_id), "--out", str(tmp_path / "b.zip"), "--json", data_dir=data
    )

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert "tensorrt" in report["skipped"]
    bundle = Path(report["bundle"])
    assert verify_bundle(bundle) == []
    with zipfile.ZipFile(bundle) as z:
        recipe = json.loads(z.read("recipe.json"))
        accuracy = json.loads(z.read("reports/accuracy.json"))
        names = z.namelist()
    assert recipe["recipe"]["name"] == "graph"
    assert recipe["made_from"]["name"] == "tiny"
    assert recipe["optimize_spec"]["recipes"] == ["graph"]
    assert "--recipe graph" in recipe["command"]
    assert accuracy["mean_cosine"] > 0.999
    assert any(n.endswith("/config.pbtxt") for n in names)
    assert any(n.startswith("openvino/") and n.endswith(".bin") for n in names)


def test_unknown_id_is_refused_with_a_hint(tmp_path: Path) -> None:
    done = optistudio("export", "4242", "--out", str(tmp_path / "b.zip"), data_dir=tmp_path / "d")
    assert done.returncode == 2
    assert "error: No model #4242 is stored." in done.stderr
    assert "hint: Model ids are printed by" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "b.zip").exists()
