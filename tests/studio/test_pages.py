"""The studio's pages answer at their own paths, the root switches to Models, and links between
pages (st.page_link) stay in the tab and lead to where a job's result is shown."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.db.models import JobKind, JobStatus
from optistudio.db.queries import claim_job, finish_job
from optistudio.db.session import transaction
from optistudio.services.catalog import add_model_file
from optistudio.services.jobkinds import JOB_KINDS
from optistudio.studio import pages
from optistudio.studio.jobs_services import submit_benchmark
from tests.studio.conftest import view_page


def _app_of_stub_pages() -> None:
    """The studio's navigation with stub pages; it lists each page's public path and shows."""
    import streamlit as st

    from optistudio.studio.pages import PAGES, navigation_pages

    def stub(path: str):  # type: ignore[no-untyped-def]
        return lambda: st.title(f"page {path}")

    navigation = navigation_pages({p.path: stub(p.path) for p in PAGES})
    for visibility in ("visible", "hidden"):
        paths = [p.url_path for p in navigation if p.visibility == visibility]
        st.text(f"{visibility}: {paths}")
    st.navigation(navigation).run()


def test_every_visible_page_answers_at_its_own_path() -> None:
    at = AppTest.from_function(_app_of_stub_pages, default_timeout=30)

    at.run()

    # Streamlit resolves a direct URL by a page's public url_path; the default page's is "",
    # which is how /models came to say "Page not found" while Models was the default.
    assert [t.value for t in at.text] == [
        "visible: ['models', 'optimize', 'jobs', 'results', 'compare', 'diagnostics', "
        "'batching', 'video', 'hardware']",
        "hidden: ['']",  # the root, which switches to Models
    ]


def test_the_root_switches_to_models_keeping_the_query() -> None:
    at = AppTest.from_function(_app_of_stub_pages, default_timeout=30)
    at.query_params["model"] = "3"

    at.run()

    assert not at.exception
    assert [t.value for t in at.title] == ["page models"]
    assert at.query_params["model"] == "3"


@pytest.mark.parametrize(
    ("kind", "model_id", "expected"),
    [
        (JobKind.benchmark, 2, ("results", {"model": "2"})),
        (JobKind.optimize, 2, ("optimize", {"model": "2"})),
        (JobKind.operator_profile, 2, ("diagnostics", {"model": "2"})),
        (JobKind.batching_verify, 2, ("batching", {"model": "2"})),
        (JobKind.compare, 2, ("compare", {})),
        (JobKind.benchmark, None, ("results", {})),
    ],
    ids=["benchmark", "optimize", "profile", "verify", "compare", "deleted-model"],
)
def test_a_job_leads_to_the_page_of_its_result(kind, model_id, expected) -> None:
    assert pages.result_target(JOB_KINDS[kind].label, model_id) == expected


def test_every_job_kind_has_a_result_page() -> None:
    assert set(pages.RESULT_PAGE) == set(JobKind)
    assert set(pages.RESULT_PAGE.values()) <= set(pages.BY_PATH)


def test_a_finished_job_links_to_its_result_in_the_same_tab(
    db_factory, app_settings, tiny_model, fresh_studio
) -> None:
    model_id = add_model_file(db_factory, app_settings, tiny_model, name="tiny").model_id
    job_id = submit_benchmark(
        db_factory, model_id=model_id, spec=BenchmarkSpec(), send=lambda name, args: "task-1"
    )
    with transaction(db_factory) as s:
        claim_job(s, job_id=job_id, worker="w", task_id="task-1")
        finish_job(s, job_id=job_id, status=JobStatus.succeeded, message="Measured")

    at = view_page("optistudio.studio.views.jobs", timeout=30)
    at.run()

    assert not at.exception
    links = [element.proto for element in at.get("page_link")]
    assert [(link.page, link.query_string) for link in links] == [("results", f"model={model_id}")]
    assert not any(link.external for link in links)  # an app page: navigated in the tab
    assert not any("](/" in md.value for md in at.markdown)  # no Markdown link (a new tab)
