"""One default for the largest batch a profile times, wherever a profile is asked for: the
Batching page's "Largest batch" (request batching and a decoder's steps), the CLI's
--max-batch-size and the spec itself, and the serving cap's default beside them."""

from __future__ import annotations

from pathlib import Path

import pytest
from decoder_models import build_tiny_decoder

from optistudio.cli import build_parser
from optistudio.cli.batching import batching_settings
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.specs import DEFAULT_MAX_BATCH_SIZE, LatencyProfileSpec
from optistudio.services.catalog import add_model_file
from tests.studio.conftest import view_page


def _largest_batch_box(model_id: int) -> int:
    at = view_page("optistudio.studio.views.batching", query={"model": str(model_id)}).run()
    assert not at.exception, at.exception
    (box,) = [n for n in at.number_input if n.label == "Largest batch"]
    return int(box.value)


def test_the_spec_and_the_serving_cap_default_alike() -> None:
    assert LatencyProfileSpec().max_batch_size == DEFAULT_MAX_BATCH_SIZE
    assert BatchingSettings().max_batch_size == DEFAULT_MAX_BATCH_SIZE


def test_the_cli_profiles_up_to_the_spec_default_unless_told(capsys) -> None:  # type: ignore[no-untyped-def]
    parser = build_parser()
    plain = parser.parse_args(["batching", "latency-profile", "m.onnx"])
    told = parser.parse_args(["batching", "latency-profile", "m.onnx", "--max-batch-size", "4"])
    with pytest.raises(SystemExit):
        parser.parse_args(["batching", "--help"])

    assert batching_settings(plain).max_batch_size == DEFAULT_MAX_BATCH_SIZE
    assert batching_settings(told).max_batch_size == 4
    assert f"(default {DEFAULT_MAX_BATCH_SIZE}, as on" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("decoder", [False, True], ids=["request-batching", "decoder"])
def test_the_page_offers_the_spec_default(  # type: ignore[no-untyped-def]
    db_factory, app_settings, make_model, tmp_path: Path, decoder: bool
) -> None:
    path = build_tiny_decoder(tmp_path / "decoder") if decoder else make_model()
    model_id = add_model_file(db_factory, app_settings, path, name="m").model_id

    assert _largest_batch_box(model_id) == DEFAULT_MAX_BATCH_SIZE
