"""The model card's offer for a file that declares fixed dims: free those its graph does not need.

The button sends an optimize job with the `free_dims` recipe alone: the worker frees every
declared dim the graph runs without (a batch of 10, a 32x32 a fully convolutional detector runs
at any size), checks that the rewrite gives the file's outputs at its declared sizes and runs at
two other sizes with its outputs scaling (optistudio.core.passes.free_dims), and stores it as a
variant: a new model with this one's input profile and task, on which every job then runs at
the shapes its users feed.
"""

from __future__ import annotations

import streamlit as st
from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.model.info import ModelInfo
from optistudio.services.jobkinds import OPTIMIZE, OptimizeJobSpec
from optistudio.studio import submitting
from optistudio.studio.jobs_services import SendTask
from optistudio.studio.optimize_services import submit_optimization

RECIPE = "free_dims"


def declared_sizes(info: ModelInfo) -> str | None:
    """'x 10x3x32x32' for the inputs that fix more than their channels (a dim of a rank-4
    input's axis 1 is read as channels), or None when none does."""
    fixed = [
        spec
        for spec in info.inputs
        if len(spec.shape) >= 2
        and any(
            isinstance(dim, int) and not (len(spec.shape) == 4 and axis == 1)
            for axis, dim in enumerate(spec.shape)
        )
    ]
    if not fixed:
        return None
    return ", ".join(
        f"{spec.name} {'x'.join(str(d) if isinstance(d, int) else '?' for d in spec.shape)}"
        for spec in fixed
    )


def free_dims_spec() -> OptimizeJobSpec:
    """The optimize job that frees the declared dims: the rewrite alone, judged like a variant."""
    return OptimizeJobSpec(recipes=[RECIPE])


def make_free(factory: sessionmaker[Session], *, model_id: int, send: SendTask) -> int:
    """Commit and send the job that frees model `model_id`'s declared dims; its id."""
    return submit_optimization(factory, spec=free_dims_spec(), model_id=model_id, send=send)


def free_dims_offer(model_id: int, info: ModelInfo) -> None:
    """The card's button beside "Make the batch dynamic", and what the job will do."""
    sizes = declared_sizes(info)
    if sizes is None:
        return
    st.caption(
        f"This file declares {sizes}. A checked rewrite frees the dims its graph does not need "
        "(batch, height, width, length): it must give the file's outputs at those sizes and "
        "run at two others; a dim the graph needs stays, and the job says which node needs it."
    )
    submitting.job_button(
        "Free the declared dims",
        key=f"free_dims_{model_id}",
        kind=OPTIMIZE,
        model_id=model_id,
        make_spec=free_dims_spec,
        then="the rewrite is stored as a new model with this one's input profile when its "
        "check passes; run the jobs on it.",
    )
