"""A job is routed to the backend and device of its spec's run target; a spec that names no
device runs on the CPU."""

from __future__ import annotations

from typing import Any

import pytest

from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.core.measure.soak import SoakSpec
from optistudio.services.jobkinds import (
    BENCHMARK,
    OPERATOR_PROFILE,
    SOAK,
    VIDEO,
    JobKindInfo,
    OperatorProfileJobSpec,
    VideoJobSpec,
)


@pytest.mark.parametrize(
    ("kind", "spec", "target"),
    [
        (BENCHMARK, BenchmarkSpec(backend="openvino", device="gpu"), ("openvino", "gpu")),
        (SOAK, SoakSpec(device="cuda:0"), ("onnxruntime", "cuda:0")),
        (OPERATOR_PROFILE, OperatorProfileJobSpec(backend="openvino"), ("openvino", "cpu")),
        (VIDEO, VideoJobSpec(backend="openvino", threads=2), ("openvino", "cpu")),
    ],
    ids=["benchmark", "soak-on-a-gpu", "operator-profile-on-cpu", "video-on-cpu"],
)
def test_a_job_goes_where_its_spec_runs(
    kind: JobKindInfo[Any, Any], spec: Any, target: tuple[str, str]
) -> None:
    assert kind.target(spec) == target


def test_the_video_spec_runs_without_spinning() -> None:
    options = VideoJobSpec(threads=2).run_target.session_options()

    assert (options.threads, options.spin_wait) == (2, False)
