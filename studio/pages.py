"""The studio's pages, the URL path of each, and links between them that stay in the tab.

Every page answers at its own path (/models, /jobs, ...), so a pasted URL or a link opens it.
Streamlit serves its default page at "/" only: when Models was the default, /models answered
"Page not found". The default page is now a hidden one that switches to Models, keeping the
query. Links between pages go through `link` (st.page_link: navigation inside the app, in the
same tab); a Markdown link always opens a new tab in Streamlit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from optistudio.db.models import JobKind
from optistudio.services.jobkinds import JOB_KINDS
from optistudio.studio.guard import guarded


@dataclass(frozen=True)
class PageEntry:
    """A page of the navigation: its URL path, title and Material icon name."""

    path: str
    title: str
    icon: str


PAGES = (
    PageEntry("models", "Models", "deployed_code"),
    PageEntry("optimize", "Optimize", "bolt"),
    PageEntry("jobs", "Jobs", "pending_actions"),
    PageEntry("results", "Results", "monitoring"),
    PageEntry("compare", "Compare", "compare_arrows"),
    PageEntry("diagnostics", "Diagnostics", "troubleshoot"),
    PageEntry("batching", "Batching", "stacks"),
    PageEntry("video", "Video", "videocam"),
    PageEntry("hardware", "Hardware", "memory"),
)
BY_PATH = {entry.path: entry for entry in PAGES}
HOME = "models"
"""The page the root URL switches to."""
ROOT_PATH = "home"
"""The hidden default page's own path (unique, as Streamlit requires; it too switches)."""

RESULT_PAGE = {
    JobKind.benchmark: "results",
    JobKind.compare: "compare",
    JobKind.optimize: "optimize",
    JobKind.operator_profile: "diagnostics",
    JobKind.soak: "diagnostics",
    JobKind.latency_profile: "batching",
    JobKind.batching_verify: "batching",
    JobKind.export: "compare",
    JobKind.video: "video",
}
"""Where each job kind's result is shown."""
_KIND_BY_LABEL = {info.label: kind for kind, info in JOB_KINDS.items()}
_MODEL_PAGES = {"results", "optimize", "diagnostics", "batching", "video"}
"""Pages that open on the model named by ?model=ID."""


def page(path: str, render: Callable[[], None] | None = None) -> st.Page:
    """The st.Page of `path`; `render` is what runs it (None for a link target: Streamlit finds
    the registered page by its path)."""
    entry = BY_PATH[path]
    return st.Page(
        guarded(render) if render else _registered,
        title=entry.title,
        icon=f":material/{entry.icon}:",
        url_path=entry.path,
    )


def navigation_pages(renders: Mapping[str, Callable[[], None]]) -> list[st.Page]:
    """Every page at its own path, plus the hidden default page at "/" that switches to HOME."""
    root = st.Page(
        go_home, title="Optistudio", url_path=ROOT_PATH, default=True, visibility="hidden"
    )
    return [root, *(page(entry.path, renders[entry.path]) for entry in PAGES)]


def go_home() -> None:
    """The root URL: switch to the home page with the same query (e.g. ?model=3)."""
    st.switch_page(page(HOME), query_params=st.query_params.to_dict())


def _registered() -> None:
    """Stands for a page registered by the app; a link target is never run itself."""


def result_target(kind_label: str, model_id: int | None) -> tuple[str, dict[str, str]] | None:
    """The page that shows a job's result and its query, from the job's kind label (as the Jobs
    page lists it); None for a kind no page shows."""
    kind = _KIND_BY_LABEL.get(kind_label)
    if kind is None:
        return None
    path = RESULT_PAGE[kind]
    query = {"model": str(model_id)} if path in _MODEL_PAGES and model_id is not None else {}
    return path, query


def link(
    path: str,
    label: str,
    *,
    query: Mapping[str, str] | None = None,
    where: DeltaGenerator | None = None,
) -> None:
    """A link to another page of the studio that opens in the same tab."""
    (where or st).page_link(
        page(path), label=label, icon=":material/arrow_forward:", query_params=dict(query or {})
    )
