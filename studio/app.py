"""Entry point of the studio: `streamlit run studio/app.py` (or `optistudio ui`)."""

from __future__ import annotations

import streamlit as st

from studio.guard import guarded
from studio.pages import compare, jobs, models, optimize, results

st.set_page_config(page_title="Optistudio", page_icon=":material/speed:", layout="wide")

PAGES = [
    st.Page(
        guarded(models.render),
        title="Models",
        icon=":material/deployed_code:",
        url_path="models",
        default=True,
    ),
    st.Page(
        guarded(optimize.render), title="Optimize", icon=":material/bolt:", url_path="optimize"
    ),
    st.Page(guarded(jobs.render), title="Jobs", icon=":material/pending_actions:", url_path="jobs"),
    st.Page(
        guarded(results.render), title="Results", icon=":material/monitoring:", url_path="results"
    ),
    st.Page(
        guarded(compare.render),
        title="Compare",
        icon=":material/compare_arrows:",
        url_path="compare",
    ),
]

st.navigation(PAGES).run()
