"""The Batching page on a stored decoder, through Streamlit's AppTest against a real migrated
SQLite database: the decoder section (decode profile, serving inputs, predicted figures and the
rate chart) instead of the request-batching sliders. The profile is the real worker job on a
tiny decoder, run in process."""

from __future__ import annotations

from pathlib import Path

import pytest
from decoder_models import build_tiny_decoder

from optistudio.core.batching.specs import LatencyProfileSpec
from optistudio.db.models import JobKind
from optistudio.services.catalog import add_model_file
from tests.studio.conftest import view_page
from tests.workers.conftest import succeeded_job

REQUEST_SLIDERS = {"Max batch size", "Timeout (ms)", "Eager threshold (0 = off)", "Instances"}


def _page(model_id: int, **query: str):  # type: ignore[no-untyped-def]
    return view_page(
        "optistudio.studio.views.batching", query={"model": str(model_id), **query}
    ).run()


@pytest.fixture
def decoder_id(db_factory, app_settings, tmp_path: Path) -> int:  # type: ignore[no-untyped-def]
    model = build_tiny_decoder(tmp_path / "decoder")
    return add_model_file(db_factory, app_settings, model, name="decoder").model_id


def _profile(factory, model_id: int) -> None:  # type: ignore[no-untyped-def]
    spec = LatencyProfileSpec(max_batch_size=4, threads=1, min_seconds=0.05)
    succeeded_job(factory, JobKind.latency_profile, model_id, spec)


def test_a_profiled_decoder_shows_its_serving_prediction(db_factory, decoder_id: int) -> None:  # type: ignore[no-untyped-def]
    _profile(db_factory, decoder_id)

    at = _page(decoder_id)

    assert not at.exception, at.exception
    assert not {s.label for s in at.slider} & REQUEST_SLIDERS
    assert [s.label for s in at.slider] == ["Max batch (sequences per step)"]
    lengths = {n.label: n.value for n in at.number_input}
    assert lengths["Prompt tokens"] == 32 and lengths["New tokens"] == 64  # fit 128 tokens
    assert lengths["Arrival rate (requests/s)"] > 0
    metrics = {m.label: m.value for m in at.metric}
    for label in ("Tokens/s", "TTFT p50 (ms)", "TTFT p99 (ms)", "Time per token p99 (ms)"):
        assert float(metrics[label]) > 0, label
    assert float(metrics["Continuous ceiling (tokens/s)"]) > 0
    assert metrics["Queue"] in ("steady", "keeps growing")
    assert len(at.get("plotly_chart")) == 2  # the measured steps and the rate sweep
    assert any("llm serve-whatif" in i.value for i in at.info)  # verifying runs from the CLI
    assert any(c.value.startswith("Not modelled:") for c in at.caption)
    assert at.query_params["decoder_batching"] == "continuous"

    at.radio[0].set_value("static").run()

    assert not at.exception, at.exception
    assert at.query_params["decoder_batching"] == "static"
    assert not at.number_input(key="decoder_timeout_ms").disabled

    at.number_input(key="decoder_prompt_tokens").set_value(100).run()

    assert not at.exception, at.exception
    assert any("needs 164 tokens of context" in w.value for w in at.warning)
    assert not [m for m in at.metric if m.label == "Tokens/s"]  # nothing predicted

    pasted = _page(
        decoder_id, decoder_batching="static", decoder_rate="5.0", decoder_max_batch="99"
    )

    assert not pasted.exception, pasted.exception
    assert pasted.radio[0].value == "static"
    assert pasted.number_input(key="decoder_rate").value == 5.0
    assert pasted.slider[0].value == 4  # 99 is past the profile's largest batch: the default


def test_an_unprofiled_decoder_asks_for_its_decode_profile(db_factory, decoder_id: int) -> None:  # type: ignore[no-untyped-def]
    at = _page(decoder_id)

    assert not at.exception, at.exception
    assert any("No decode profile of this model yet" in i.value for i in at.info)
    assert not at.slider and not at.metric
    assert [b.label for b in at.button] == ["Profile"]


def test_a_one_shot_model_keeps_the_request_batching(db_factory, app_settings, make_model) -> None:  # type: ignore[no-untyped-def]
    model_id = add_model_file(db_factory, app_settings, make_model(), name="m").model_id

    at = _page(model_id)

    assert not at.exception, at.exception
    assert any("No profile of this model yet" in i.value for i in at.info)
    assert not any("decode" in i.value for i in at.info)
    assert "Largest batch" in [n.label for n in at.number_input]
