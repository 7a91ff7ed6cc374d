"""A variant that runs a file on a backend at a precision of its own is a catalog entry: its own
id and row (backend, precision, threads), the same stored file, and an export that says so."""

from __future__ import annotations

from pathlib import Path

from optistudio.db.models import Model
from optistudio.db.queries import get_model
from optistudio.db.session import transaction
from optistudio.services.backend_variants import add_backend_variant, recorded_backend
from optistudio.services.bundles import bundle_source
from optistudio.services.catalog import add_model_file

BF16 = {
    "name": "bf16",
    "label": "BF16 inference",
    "steps": [],
    "backend": "openvino",
    "precision": "bf16",
}


def row(factory, model_id: int) -> Model:  # type: ignore[no-untyped-def]
    with transaction(factory) as s:
        model = get_model(s, model_id=model_id)
        assert model is not None
        s.expunge(model)
        return model


def bf16_of(factory, settings, original, path: Path, threads: int | None = 2):  # type: ignore[no-untyped-def]
    return add_backend_variant(
        factory,
        settings,
        path,
        name="tiny · bf16@openvino",
        parent_id=original.model_id,
        recipe=BF16,
        backend="openvino",
        precision="bf16",
        threads=threads,
    )


def test_bf16_on_openvino_of_the_originals_bytes_is_a_model_of_its_own(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tiny_model: Path
) -> None:
    original = add_model_file(db_factory, app_settings, tiny_model, name="tiny")

    variant = bf16_of(db_factory, app_settings, original, tiny_model)

    assert variant.created and variant.model_id != original.model_id
    stored, made = row(db_factory, original.model_id), row(db_factory, variant.model_id)
    assert (made.backend, made.precision, made.threads) == ("openvino", "bf16", 2)
    assert (made.sha256, made.path) == (stored.sha256, stored.path)  # the same stored file
    assert (made.parent_id, made.source, made.recipe) == (original.model_id, "variant", BF16)
    assert (stored.backend, stored.threads) == ("", None)


def test_the_same_run_twice_is_one_model_and_an_upload_of_the_bytes_is_the_original(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tiny_model: Path
) -> None:
    original = add_model_file(db_factory, app_settings, tiny_model, name="tiny")
    first = bf16_of(db_factory, app_settings, original, tiny_model)

    again = bf16_of(db_factory, app_settings, original, tiny_model, threads=None)
    upload = add_model_file(db_factory, app_settings, tiny_model, name="tiny again")

    assert (again.model_id, again.created) == (first.model_id, False)
    assert (upload.model_id, upload.created) == (original.model_id, False)


def test_the_export_of_the_variant_names_its_backend_precision_and_threads(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tiny_model: Path
) -> None:
    original = add_model_file(db_factory, app_settings, tiny_model, name="tiny")
    variant = bf16_of(db_factory, app_settings, original, tiny_model)

    source = bundle_source(db_factory, app_settings, variant.model_id)
    plain = bundle_source(db_factory, app_settings, original.model_id)

    assert (source.backend, source.precision, source.threads) == ("openvino", "bf16", 2)
    assert (plain.backend, plain.precision, plain.threads) == (None, "fp32", None)


def test_onnx_runtime_is_recorded_as_running_the_file_as_it_is() -> None:
    assert [recorded_backend(b) for b in ("onnxruntime", "openvino", "tensorrt")] == [
        "",
        "openvino",
        "tensorrt",
    ]
