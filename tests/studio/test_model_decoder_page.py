"""The Models page on a stored decoder, through Streamlit's AppTest against a real migrated
SQLite database: the language model's card (layers, heads, KV heads, vocabulary, context, the
cache a token adds, the parameter split) and its newest decoding benchmark, and no input sizes
to edit. The benchmark is the real worker job on a tiny decoder, run in process."""

from __future__ import annotations

from pathlib import Path

import pytest
from decoder_models import TinyShape, build_tiny_decoder

from optistudio.core.llm.card import read_card
from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.db.models import JobKind
from optistudio.services.catalog import add_model_file
from optistudio.studio.formatting import human_bytes
from optistudio.studio.views.model_decoder import (
    BENCH_CAPTION,
    NOT_PROFILED,
    card_warnings,
    decoder_targets,
)
from tests.studio.conftest import view_page
from tests.workers.conftest import succeeded_job


def _page(model_id: int):  # type: ignore[no-untyped-def]
    return view_page("optistudio.studio.views.models", query={"model": str(model_id)}).run()


@pytest.fixture
def decoder(db_factory, app_settings, tmp_path: Path) -> tuple[int, Path]:  # type: ignore[no-untyped-def]
    model = build_tiny_decoder(tmp_path / "decoder")
    return add_model_file(db_factory, app_settings, model, name="decoder").model_id, model


def test_a_decoders_card_reads_as_a_language_models(db_factory, decoder) -> None:  # type: ignore[no-untyped-def]
    model_id, path = decoder
    card, shape = read_card(path), TinyShape()

    at = _page(model_id)

    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Layers"] == str(shape.layers) == str(card.layers)
    assert metrics["Heads / KV heads"] == f"{card.heads} / {card.kv_heads}"
    assert metrics["KV cache per token"] == human_bytes(card.kv_bytes_per_token)
    assert any("in the embeddings" in c.value for c in at.caption)
    assert NOT_PROFILED in [i.value for i in at.info]  # no sizes to edit for a decoder
    assert not [b for b in at.button if b.label == "Save input profile"]
    assert any("No decoding benchmark yet" in c.value for c in at.caption)


def test_the_card_shows_the_newest_decoding_benchmark(db_factory, decoder) -> None:  # type: ignore[no-untyped-def]
    model_id, _ = decoder
    spec = BenchmarkSpec(threads=1, batch_sizes=[1, 2])
    job_id = succeeded_job(db_factory, JobKind.benchmark, model_id, spec).id

    at = _page(model_id)

    assert not at.exception, at.exception
    [bench] = [e for e in at.expander if e.label.startswith("Newest decoding benchmark")]
    assert f"job #{job_id}" in bench.label
    batches = list(bench.dataframe[1].value["batch"])
    assert batches == [1, 2]


def test_a_decoders_page_leaves_out_what_its_decode_loop_sets(decoder) -> None:  # type: ignore[no-untyped-def]
    model_id, _ = decoder

    at = _page(model_id)

    assert not at.exception, at.exception
    warnings = [w.value for w in at.warning]
    assert not [w for w in warnings if "dynamic dims" in w or "FLOPs" in w], warnings
    assert BENCH_CAPTION in [c.value for c in at.caption]
    assert not [c.value for c in at.caption if c.value.startswith("Inputs: ")]
    inputs = {w.label: w for w in [*at.number_input, *at.text_input]}
    ignored = ["Warm-up runs", "Min runs", "Min seconds", "Max seconds (cap)"]
    assert all(inputs[label].proto.disabled for label in [*ignored, "CPU cores (empty = any)"])
    assert (
        not inputs["Batch sizes"].proto.disabled
        and not inputs["Threads (0 = default)"].proto.disabled
    )


def test_a_plain_models_page_keeps_its_warnings_and_timing_settings(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    from optistudio.core.model.samples import build_sample

    model = build_sample("tiny_cnn", tmp_path / "cnn")
    model_id = add_model_file(db_factory, app_settings, model, name="cnn").model_id

    at = _page(model_id)

    assert not at.exception, at.exception
    assert [c.value for c in at.caption if c.value.startswith("Inputs: ")]
    assert [w.value for w in at.warning if w.value.startswith("dynamic dims")]
    assert not {w.label: w for w in at.number_input}["Warm-up runs"].proto.disabled


@pytest.mark.parametrize(
    ("live", "kept"),
    [
        pytest.param(
            [
                ("onnxruntime", "cpu", "fp32"),
                ("openvino", "cpu", "bf16"),
                ("openvino", "cpu", "fp32"),
            ],
            [("onnxruntime", "cpu", "fp32"), ("openvino", "cpu", "fp32")],
            id="bf16-left-out",
        ),
        pytest.param([("onnxruntime", "cpu", "int8")], [], id="none-fp32"),
    ],
)
def test_a_decoder_is_offered_only_fp32_targets(live, kept) -> None:  # type: ignore[no-untyped-def]
    assert decoder_targets(live) == kept


@pytest.mark.parametrize(
    ("warning", "shown"),
    [
        pytest.param(
            "dynamic dims batch_size, sequence_length on input input_ids", False, id="dims"
        ),
        pytest.param(
            "FLOPs could not be estimated: some Conv/MatMul/Gemm shapes are unknown",
            False,
            id="flops",
        ),
        pytest.param("2 initializers are stored as external data", True, id="other"),
    ],
)
def test_a_decoders_card_drops_only_intakes_dynamic_dim_warnings(warning, shown) -> None:  # type: ignore[no-untyped-def]
    assert (card_warnings([warning]) == [warning]) is shown
