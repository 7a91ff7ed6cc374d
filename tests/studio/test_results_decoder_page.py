"""The Results page on a benchmarked decoder, through Streamlit's AppTest against a real migrated
SQLite database: its decoding tables, each named, and no "No results yet" under them (a
decoder's benchmark stores a report, not measurement rows). The benchmark is the real worker
job on a tiny decoder, run in process."""

from __future__ import annotations

from pathlib import Path

from decoder_models import build_tiny_decoder

from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.db.models import JobKind
from optistudio.services.catalog import add_model_file
from tests.studio.conftest import view_page
from tests.workers.conftest import succeeded_job

NO_RESULTS = "No results yet. Pick a model on the Models page and press **Benchmark**."


def _page(model_id: int):  # type: ignore[no-untyped-def]
    return view_page("optistudio.studio.views.results", query={"model": str(model_id)}).run()


def _stored_decoder(db_factory, app_settings, tmp_path: Path) -> int:  # type: ignore[no-untyped-def]
    model = build_tiny_decoder(tmp_path / "decoder")
    return add_model_file(db_factory, app_settings, model, name="decoder").model_id


def test_a_decoders_benchmark_is_its_result(db_factory, app_settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model_id = _stored_decoder(db_factory, app_settings, tmp_path)
    spec = BenchmarkSpec(threads=1, batch_sizes=[1, 2])
    job_id = succeeded_job(db_factory, JobKind.benchmark, model_id, spec).id

    at = _page(model_id)

    assert not at.exception, at.exception
    assert [h.value for h in at.subheader] == [f"Decoding · job #{job_id} · decoder"]
    assert NO_RESULTS not in [i.value for i in at.info]
    labels = [m.value for m in at.markdown]
    assert {"**Greedy decoding**", "**Time to first token (batch 1)**"} <= set(labels)
    assert list(at.dataframe[0].value["batch"]) == [1, 2]


def test_a_decoder_not_yet_benchmarked_says_so(db_factory, app_settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model_id = _stored_decoder(db_factory, app_settings, tmp_path)

    at = _page(model_id)

    assert not at.exception, at.exception
    assert NO_RESULTS in [i.value for i in at.info]
