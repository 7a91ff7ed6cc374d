"""Entry point of the studio: `streamlit run studio/app.py` (or `optistudio ui`)."""

from __future__ import annotations

import streamlit as st

from optistudio.studio import state
from optistudio.studio.auth import require_login
from optistudio.studio.formatting import upload_limit_style
from optistudio.studio.guard import guarded
from optistudio.studio.pages import navigation_pages
from optistudio.studio.views import (
    batching,
    compare,
    diagnostics,
    hardware,
    jobs,
    models,
    optimize,
    results,
    video,
)

st.set_page_config(page_title="Optistudio", page_icon=":material/speed:", layout="wide")
st.markdown(upload_limit_style(state.settings().max_upload_mb), unsafe_allow_html=True)

if "share" in st.query_params:  # a share link shows its snapshot only: no navigation, no login
    from optistudio.studio.share_view import render_shared

    guarded(lambda: render_shared(st.query_params["share"]))()
    st.stop()

require_login()  # everything past share links needs a login when one is configured

RENDERS = {  # url path -> page; titles, icons and order are in studio/pages.py
    "models": models.render,
    "optimize": optimize.render,
    "jobs": jobs.render,
    "results": results.render,
    "compare": compare.render,
    "diagnostics": diagnostics.render,
    "batching": batching.render,
    "video": video.render,
    "hardware": hardware.render,
}

st.navigation(navigation_pages(RENDERS)).run()
