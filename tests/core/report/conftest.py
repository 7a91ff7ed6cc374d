"""A task of our own in the evaluator registry, so the report tests do not depend on which
evaluators are installed: its metrics' directions come only from this registration."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from optistudio.core.numerics.evaluators.base import EvaluatorInfo, MetricInfo, evaluators

GLYPHS = EvaluatorInfo(
    name="report_test_glyphs",
    label="Glyph reading (test task)",
    description="A task made up for the report tests.",
    metrics=[
        MetricInfo(name="glyph_agreement", label="Glyph agreement", higher_is_better=True),
        MetricInfo(
            name="glyph_error_rate", label="Glyph error rate", higher_is_better=False, unit="ratio"
        ),
        MetricInfo(
            name="glyph_accuracy", label="Glyph accuracy", higher_is_better=True, needs_labels=True
        ),
        # a task cannot turn the metric table's direction round
        MetricInfo(name="cosine_error", label="Backwards cosine", higher_is_better=True),
    ],
    default_budget={"glyph_agreement": 0.99},
    implementation="optistudio.core.numerics.evaluators.base:Evaluator",
)


@pytest.fixture
def glyph_task() -> Iterator[EvaluatorInfo]:
    evaluators.register(GLYPHS)
    yield GLYPHS
    evaluators._entries.pop(GLYPHS.name, None)  # the registry has no unregister; tests only
