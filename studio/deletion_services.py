"""Deleting from the studio, without Streamlit: what a model occupies on disk, the confirmation
a delete button shows, the delete itself as a sentence or a refusal, and which results of a
shared snapshot were deleted since it was shared (`optistudio.services.deletion` does the work).
"""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.errors import ErrorInfo, OptistudioError
from optistudio.core.report.snapshot import CompareSnapshot
from optistudio.db.queries import existing_job_ids
from optistudio.db.session import transaction
from optistudio.services.deletion import (
    DeletionPlan,
    delete_job,
    delete_model,
    megabytes,
    plan_job_deletion,
    plan_model_deletion,
)
from optistudio.services.settings import Settings

PARTS = (
    ("model", "the model"),
    ("variants", "its variants"),
    ("jobs", "job outputs"),
    ("data", "data files only its jobs use"),
)
UNDONE = "This cannot be undone; a share link of a deleted result says it was deleted."


def disk_use(plan: DeletionPlan) -> str:
    """'On disk: 12.3 MB (the model 4.1 MB, its variants 8.0 MB, job outputs 0.2 MB).': what the
    model and everything deleted with it occupy; parts holding nothing are left out."""
    parts = [
        f"{label} {megabytes(plan.bytes_by_part[key])}"
        for key, label in PARTS
        if plan.bytes_by_part.get(key)
    ]
    inside = f" ({', '.join(parts)})" if len(parts) > 1 else ""
    return f"On disk: {megabytes(plan.bytes_on_disk)}{inside}."


def confirmation(plan: DeletionPlan) -> str:
    """What a delete button asks before it deletes: what goes, what stays, that it is final."""
    return " ".join([plan.sentence(), *plan.kept, UNDONE])


def model_plan(
    factory: sessionmaker[Session], settings: Settings, *, model_id: int
) -> DeletionPlan | ErrorInfo:
    """What deleting the model would remove, or why it cannot be planned (it is gone)."""
    try:
        return plan_model_deletion(factory, settings, model_id=model_id)
    except OptistudioError as exc:
        return exc.info()


def job_plan(
    factory: sessionmaker[Session], settings: Settings, *, job_id: int
) -> DeletionPlan | ErrorInfo:
    """What deleting the job would remove, or why not."""
    try:
        return plan_job_deletion(factory, settings, job_id=job_id)
    except OptistudioError as exc:
        return exc.info()


def delete_model_now(
    factory: sessionmaker[Session], settings: Settings, *, model_id: int
) -> str | ErrorInfo:
    """Delete the model: 'Deleted model #3 resnet: freed …', or the refusal (a job still going)."""
    try:
        done = delete_model(factory, settings, model_id=model_id)
    except OptistudioError as exc:
        return exc.info()
    return f"Deleted {done.subject}: freed {done.freed()}."


def delete_job_now(
    factory: sessionmaker[Session], settings: Settings, *, job_id: int
) -> str | ErrorInfo:
    """Delete a finished job: 'Deleted job #7: freed …', or the refusal."""
    try:
        done = delete_job(factory, settings, job_id=job_id)
    except OptistudioError as exc:
        return exc.info()
    return f"Deleted {done.subject}: freed {done.freed()}."


def deleted_results(factory: sessionmaker[Session], snapshot: CompareSnapshot) -> list[str]:
    """The labels of the snapshot's results whose job was deleted after it was shared."""
    with transaction(factory) as s:
        present = existing_job_ids(s, job_ids={row.job_id for row in snapshot.rows})
    return [row.label for row in snapshot.rows if row.job_id not in present]


def deleted_note(labels: list[str], total: int) -> str | None:
    """What a share page says when results it shows were deleted since; None when none was."""
    if not labels:
        return None
    if len(labels) == total:
        lead = "This result was deleted" if total == 1 else "These results were deleted"
    else:
        lead = f"{len(labels)} of these {total} results were deleted"
    listed = "".join(f"\n- {label}" for label in labels)
    return (
        f"{lead} after this link was made. The snapshot keeps the figures as they were when "
        f"shared; the studio no longer holds them.{listed if len(labels) < total else ''}"
    )
