"""Intake isolated (issue 39, item 4): the studio's upload and the CLI's `--save` check that a new
model loads in a child process under the settings' limits. A file that exhausts them is refused
in one sentence, nothing is stored and the calling process carries on; a normal model is
stored as before."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hostile_models import sparse_weight_model
from sqlalchemy import func, select

from optistudio.core.errors import ModelRejected
from optistudio.db.models import Model
from optistudio.db.session import transaction
from optistudio.services.catalog import add_model_file, add_upload
from optistudio.services.settings import Settings

MiB = 2**20


def _model_rows(factory) -> int:  # type: ignore[no-untyped-def]
    with transaction(factory) as s:
        return int(s.scalar(select(func.count()).select_from(Model)) or 0)


def _stored_files(settings: Settings) -> list[Path]:
    return [p for p in settings.artifact_dir.rglob("*") if p.is_file()]


def test_a_cli_save_over_the_memory_limit_is_refused_and_nothing_is_stored(  # type: ignore[no-untyped-def]
    db_factory, app_settings: Settings, tmp_path: Path
) -> None:
    limited = app_settings.model_copy(update={"load_check_memory_mb": 512, "max_upload_mb": 2048})
    model = sparse_weight_model(tmp_path / "big", 768 * MiB)

    with pytest.raises(ModelRejected, match=r"within 120 s and 512 MB: it ran out of memory\."):
        add_model_file(db_factory, limited, model, name="big", origin="cli")

    assert _model_rows(db_factory) == 0 and _stored_files(limited) == []


def test_an_upload_past_the_time_limit_is_refused_and_leaves_no_scratch(  # type: ignore[no-untyped-def]
    db_factory, app_settings: Settings, tiny_model: Path
) -> None:
    hurried = app_settings.model_copy(update={"load_check_time_s": 0.001})

    with pytest.raises(ModelRejected, match=r"within 0\.001 s .*: it took longer than that\."):
        add_upload(db_factory, hurried, io.BytesIO(tiny_model.read_bytes()), filename="t.onnx")

    assert _model_rows(db_factory) == 0 and _stored_files(hurried) == []
    assert list((hurried.data_dir / "incoming").iterdir()) == []


def test_a_normal_upload_is_stored_after_its_isolated_check(  # type: ignore[no-untyped-def]
    db_factory, app_settings: Settings, tiny_model: Path
) -> None:
    entry = add_upload(
        db_factory, app_settings, io.BytesIO(tiny_model.read_bytes()), filename="tiny.onnx"
    )

    assert entry.created and entry.path.read_bytes() == tiny_model.read_bytes()
    assert _model_rows(db_factory) == 1


def test_the_limits_are_settings_with_their_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPTISTUDIO_LOAD_CHECK_TIME_S", "30")
    monkeypatch.setenv("OPTISTUDIO_LOAD_CHECK_MEMORY_MB", "2048")

    settings = Settings()

    assert (settings.load_check_time_s, settings.load_check_memory_mb) == (30.0, 2048)
    defaults = Settings.model_fields
    assert defaults["load_check_time_s"].default == 120.0
    assert defaults["load_check_memory_mb"].default == 0


def test_bench_save_on_the_cli_goes_through_the_isolated_check(
    tiny_model: Path, tmp_path: Path
) -> None:
    from cli_runner import run_in_process

    done = run_in_process(
        ["bench", str(tiny_model), "--batch", "1", "--save", "--min-runs", "2", "--warmup", "1"],
        set_env={
            "OPTISTUDIO_DATA_DIR": str(tmp_path / "data"),
            "OPTISTUDIO_LOAD_CHECK_TIME_S": "0.001",
        },
        unset_env=("OPTISTUDIO_DATABASE_URL",),
    )

    assert done.returncode == 2, done.stderr
    assert "ONNX Runtime could not load the model within 0.001 s" in done.stderr
