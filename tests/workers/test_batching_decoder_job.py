"""The latency profile job on a stored decoder times its decode steps and prefills (a
DecodeProfile), not one forward pass per batch size; a one-shot model's row is unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
from decoder_models import build_tiny_decoder
from pydantic import ValidationError

from optistudio.core.batching.specs import LatencyProfileSpec
from optistudio.core.llm.serving_whatif import DecodeProfile
from optistudio.db.models import JobKind, JobStatus
from optistudio.services.jobkinds import LATENCY_PROFILE
from optistudio.services.jobresults import LatencyProfileJobResult
from optistudio.workers.batching_decoder import DECODE_MAX_BATCH, decode_batch_sizes
from tests.workers.conftest import finished_job


def test_a_decoders_batching_profile_is_its_decode_steps(  # type: ignore[no-untyped-def]
    db_factory, store_model, tmp_path: Path
) -> None:
    model_id = store_model(build_tiny_decoder(tmp_path / "decoder"), name="decoder")
    spec = LatencyProfileSpec(max_batch_size=4, threads=1, min_seconds=0.05)

    job = finished_job(db_factory, JobKind.latency_profile, model_id, spec)
    status, message, stored, environment = job.status, job.message, job.result, job.environment_id

    assert status == JobStatus.succeeded, message
    assert "profile" not in stored and "ceiling" not in stored  # no latency profile pretended
    result = LATENCY_PROFILE.parse_result(stored)
    decode = result.decode_profile
    assert result.profile is None and decode is not None
    assert decode.batch_sizes == [1, 2, 4]
    assert [len(runs) for runs in decode.step_runs_ms] == [32, 32, 32]
    assert all(ms > 0 for ms in decode.step_ms) and all(ms > 0 for ms in decode.prefill_ms)
    assert decode.prompt_lengths == [32, 128]  # the tiny decoder holds 128 tokens
    assert decode.backend == "onnxruntime" and decode.threads == 1
    assert message.startswith("Timed a decode step at batch 1, 2 and 4")
    assert "prefills of 32 and 128 tokens" in message and "tokens/s at batch 1" in message
    assert f"{decode.tokens_per_s(4):.1f} at 4" in message
    assert environment is not None


def test_the_decode_batch_sizes_double_up_to_the_largest_capped() -> None:
    assert decode_batch_sizes(1) == [1]
    assert decode_batch_sizes(6) == [1, 2, 4, 6]
    assert decode_batch_sizes(256) == [1, 2, 4, 8, 16, DECODE_MAX_BATCH]


def test_a_batching_profile_result_holds_one_profile_of_the_two() -> None:
    decode = DecodeProfile(batch_sizes=[1], step_ms=[1.0], prompt_lengths=[8], prefill_ms=[1.0])

    with pytest.raises(ValidationError, match="one of them"):
        LatencyProfileJobResult()
    stored = LATENCY_PROFILE.dump_result(LatencyProfileJobResult(decode_profile=decode))
    assert set(stored) == {"decode_profile"}
    assert LATENCY_PROFILE.parse_result(stored).decode_profile == decode
