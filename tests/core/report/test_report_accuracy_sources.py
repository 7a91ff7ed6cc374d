"""The HTML report says where each result's accuracy figures come from, as the Compare page's
expander and the JSON do: a variant judged on built-in samples or random inputs is named so,
never 'your data' (issue 44, item 3)."""

from __future__ import annotations

from test_compare_report import row

from optistudio.core.optimize.provenance import data_label
from optistudio.core.report.html import report_html
from optistudio.core.report.snapshot import CompareSnapshot

SOURCES = "Where the accuracy figures come from"


def test_each_results_samples_are_named_in_the_report() -> None:
    notes = {1: "", 2: f"accuracy on {data_label('builtin')}", 3: f"on {data_label('synthetic')}"}
    rows = [row(job, 1.0, 0.0).model_copy(update={"accuracy_note": n}) for job, n in notes.items()]

    page = report_html(CompareSnapshot(title="t", rows=rows))

    sources = page.split(SOURCES)[1].split("</ul>")[0]
    assert f"{rows[1].label}: accuracy on built-in samples, not your data</li>" in sources
    assert f"{rows[2].label}: on random inputs, not your data</li>" in sources
    assert rows[0].label not in sources  # a result with no note is not listed


def test_a_report_without_notes_has_no_sources_section() -> None:
    page = report_html(CompareSnapshot(title="t", rows=[row(1, 1.0, 0.0)]))

    assert SOURCES not in page
