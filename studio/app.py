"""Entry point of the studio: `streamlit run studio/app.py` (or `optistudio ui`)."""

from __future__ import annotations

import streamlit as st

from optistudio.studio.auth import require_login
from optistudio.studio.guard import guarded
from optistudio.studio.views import (
    batching,
    compare,
    diagnostics,
    hardware,
    jobs,
    models,
    optimize,
    results,
)

st.set_page_config(page_title="Optistudio", page_icon=":material/speed:", layout="wide")

if "share" in st.query_params:  # a share link shows its snapshot only: no navigation, no login
    from optistudio.studio.share_view import render_shared

    guarded(lambda: render_shared(st.query_params["share"]))()
    st.stop()

require_login()  # everything past share links needs a login when one is configured

PAGES = [
    # (render, title, icon, url path)
    (models.render, "Models", "deployed_code", "models"),
    (optimize.render, "Optimize", "bolt", "optimize"),
    (jobs.render, "Jobs", "pending_actions", "jobs"),
    (results.render, "Results", "monitoring", "results"),
    (compare.render, "Compare", "compare_arrows", "compare"),
    (diagnostics.render, "Diagnostics", "troubleshoot", "diagnostics"),
    (batching.render, "Batching", "stacks", "batching"),
    (hardware.render, "Hardware", "memory", "hardware"),
]

navigation = st.navigation(
    [
        st.Page(
            guarded(render),
            title=title,
            icon=f":material/{icon}:",
            url_path=path,
            default=index == 0,
        )
        for index, (render, title, icon, path) in enumerate(PAGES)
    ]
)
navigation.run()
