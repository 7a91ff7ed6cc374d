"""`optistudio batching ... --save` (or a model id) stores its results as the studio does, and
the bundle's Triton config serves the newest: verified, else recommended, else profiled, else
the default, never the benchmark's batch."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from test_cli import optistudio

from optistudio.core.batching.triton import parse_pbtxt
from optistudio.core.report.bundle import write_bundle
from optistudio.db.session import make_session_factory, transaction
from optistudio.services.bundles import bundle_source, serving_setting
from optistudio.services.settings import get_settings

SMALL = ["--max-batch-size", "4", "--instance-counts", "1", "--quick", "--json"]


def served(data: Path, model_id: int, monkeypatch: pytest.MonkeyPatch) -> dict:  # type: ignore[type-arg]
    """The setting an export of the model serves, read from the database the CLI wrote."""
    monkeypatch.setenv("OPTISTUDIO_DATA_DIR", str(data))
    monkeypatch.delenv("OPTISTUDIO_DATABASE_URL", raising=False)
    get_settings.cache_clear()
    with transaction(make_session_factory(get_settings().database_url)) as s:
        return serving_setting(s, model_id=model_id)


def cli_json(*args: str, data: Path) -> dict:  # type: ignore[type-arg]
    done = optistudio("batching", *args, data_dir=data)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


@pytest.mark.timing
def test_profile_recommend_and_verify_reach_the_export_newest_verified_first(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, saved = tmp_path / "data", tmp_path / "profile.json"
    profiled = cli_json(
        "latency-profile", str(tiny_model), "--save", "--rate", "100", "--out", str(saved),
        *SMALL, data=data,
    )  # fmt: skip
    # a file without --save stores nothing (every verb decides it in one place: stored_model)
    unsaved = cli_json(
        "recommend", str(tiny_model), "--profile", str(saved), "--p99-budget-ms", "200",
        *SMALL, data=data,
    )  # fmt: skip
    assert unsaved["stored"] is None
    model_id = profiled["stored"]["model_id"]
    after_profile = served(data, model_id, monkeypatch)
    assert after_profile["source"] == "profiled"
    assert after_profile["job"] == profiled["stored"]["job_id"]
    assert after_profile["max_batch_size"] == profiled["ceiling_batch_size"]

    advised = cli_json(  # on the profile just measured: recommend on an id measures one anew
        "recommend", str(model_id), "--profile", str(saved), "--p99-budget-ms", "200", *SMALL,
        data=data,
    )  # fmt: skip
    after_recommend = served(data, model_id, monkeypatch)
    assert advised["stored"]["model_id"] == model_id  # an id always stores
    assert after_recommend["source"] == "recommended"
    assert after_recommend["max_batch_size"] == advised["settings"]["max_batch_size"]
    assert after_recommend["timeout_ms"] == advised["settings"]["timeout_ms"]

    verify = ["--rate", "50", "--seconds", "0.5", "--preferred", "2,4", "--timeout-ms", "1.5"]
    verified = cli_json("verify", str(model_id), *verify, "--instances", "2", *SMALL, data=data)
    after_verify = served(data, model_id, monkeypatch)
    assert after_verify["source"] == "verified"
    assert after_verify["verify_job"] == verified["stored"]["job_id"]
    assert f"Verify job #{verified['stored']['job_id']}" in after_verify["note"]

    factory = make_session_factory(get_settings().database_url)
    source = bundle_source(factory, get_settings(), model_id)
    source.coreml_precisions, source.litert_precisions = [], []
    bundle = write_bundle(source, tmp_path / "b.zip").path
    with zipfile.ZipFile(bundle) as z:
        config = parse_pbtxt(z.read(f"triton/{_name(z)}/config.pbtxt").decode())
        manifest = json.loads(z.read("manifest.json"))
    get_settings.cache_clear()
    assert config["max_batch_size"] == 4
    assert config["dynamic_batching"]["preferred_batch_size"] == [2, 4]
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 1500
    assert config["instance_group"][0]["count"] == 2
    assert manifest["serving"].startswith("verified: served and measured by Verify job #")


def _name(z: zipfile.ZipFile) -> str:
    names = [n for n in z.namelist() if n.endswith("/config.pbtxt")]
    return str(names[0].split("/")[1])


def test_an_unknown_model_id_is_refused_with_a_hint(tmp_path: Path) -> None:
    # `profile`: the former name of latency-profile, still accepted (as scripts type it)
    done = optistudio("batching", "profile", "4242", "--json", data_dir=tmp_path / "d")
    assert done.returncode == 2
    assert "No model #4242 is stored." in done.stderr and "Traceback" not in done.stderr
