"""The model card's offer for a batch fixed at 1: make it dynamic in one click.

The button sends an optimize job with the `dynamic_batch` recipe alone: the worker rewrites the
graph so its batch is free and checks, on the model's own input profile, that batch N gives
row for row what N runs at batch 1 give (optistudio.core.passes.dynamic_batch). The rewrite is
stored as a variant, a new model that keeps this one's input profile and task. The Batching
page and the video scenario do not need it: they batch a checked rewrite on their own.
"""

from __future__ import annotations

import streamlit as st
from sqlalchemy.orm import Session, sessionmaker

from optistudio.services.jobkinds import OPTIMIZE, OptimizeJobSpec
from optistudio.studio import submitting
from optistudio.studio.jobs_services import SendTask
from optistudio.studio.optimize_services import submit_optimization

RECIPE = "dynamic_batch"


def dynamic_batch_spec() -> OptimizeJobSpec:
    """The optimize job that frees the batch: the rewrite alone, judged like any variant."""
    return OptimizeJobSpec(recipes=[RECIPE])


def make_dynamic(factory: sessionmaker[Session], *, model_id: int, send: SendTask) -> int:
    """Commit and send the job that rewrites model `model_id` with a free batch; its id."""
    return submit_optimization(factory, spec=dynamic_batch_spec(), model_id=model_id, send=send)


def dynamic_batch_offer(model_id: int) -> None:
    """The card's button, and what the job will do (Streamlit)."""
    st.caption(
        "Batch fixed at 1 by the model. A checked rewrite can free it: batch N must give, row "
        "for row, what N runs at batch 1 give. The Batching page and the video scenario batch "
        "such a rewrite on their own; make it here to benchmark and export it as a model."
    )
    submitting.job_button(
        "Make the batch dynamic",
        key=f"dynamic_batch_{model_id}",
        kind=OPTIMIZE,
        model_id=model_id,
        make_spec=dynamic_batch_spec,
        then="the rewrite with a free batch is stored as a new model with this one's input "
        "profile when the check passes.",
    )
