"""Where a job goes: the queue of a live worker that offers its target, or a refusal that says
what the workers offer; the targets the live workers run; where QAT would train."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.backends.inventory import pick_queue, targets, trains_on
from optistudio.core.errors import NoWorkerForTarget
from optistudio.core.model.info import ModelInfo
from optistudio.db.queries import live_workers
from optistudio.db.session import transaction
from optistudio.services.jobkinds import TRAINING_ORDER
from optistudio.studio.worker_services import offer_summary


def route(
    factory: sessionmaker[Session],
    *,
    backend: str,
    device: str,
    max_age_s: float,
    suits: Callable[[dict[str, Any]], int] | None = None,
) -> str:
    """The queue of a live worker offering `backend` on `device` (the one `suits` ranks first,
    else the first); refuse clearly if none."""
    with transaction(factory) as s:
        workers = [
            (w.hostname, w.queues, w.inventory) for w in live_workers(s, max_age_s=max_age_s)
        ]
    live = [(queues, inventory) for _hostname, queues, inventory in workers]
    queue = pick_queue(live, backend=backend, device=device, suits=suits)
    if queue is not None:
        return queue
    if not workers:
        raise NoWorkerForTarget(
            "No worker is running, so the job cannot be started.",
            hint="Start the stack with `make up`, or add a worker with `optistudio worker`.",
        )
    raise NoWorkerForTarget(
        f"No live worker offers {backend} on {device}. Workers now: "
        + "; ".join(offer_summary(host, inventory) for host, _, inventory in workers)
        + ".",
        hint="Pick one of those targets, or start a worker on a machine that has it."
        + _why_missing(backend, [inventory for _, _, inventory in workers]),
    )


def _why_missing(backend: str, inventories: list[dict[str, Any]]) -> str:
    """What a worker said about `backend` it cannot run (e.g. litert: the extra to install)."""
    reasons = sorted(
        {
            entry["reason"]
            for inventory in inventories
            if (entry := inventory.get("backends", {}).get(backend)) and not entry["available"]
        }
    )
    return f" {backend} on the workers now: {reasons[0]}." if reasons else ""


def qat_places(factory: sessionmaker[Session], *, max_age_s: float) -> str:
    """One sentence: where quantization-aware training would run among the live workers."""
    with transaction(factory) as s:
        found = [
            (w.hostname, trains_on(w.inventory), w.inventory)
            for w in live_workers(s, max_age_s=max_age_s)
        ]
    able = sorted(
        (
            TRAINING_ORDER.get(device, len(TRAINING_ORDER)),
            f"{host} ({device.upper() if device == 'cuda' else 'CPU'}, torch {inv['training']['torch']})",
        )
        for host, device, inv in found
        if device
    )
    if not found:
        return "No worker is running: start one to train."
    if not able:
        return (
            "No live worker can train: install the qat extra on a worker "
            "(pip install 'optistudio[qat]', the CPU wheel of torch 2.13) and restart it."
        )
    return "QAT trains on " + ", ".join(place for _, place in able) + " (the first is preferred)."


def live_targets(
    factory: sessionmaker[Session], *, max_age_s: float, info: ModelInfo | None = None
) -> list[tuple[str, str, str]]:
    """(backend, device, precision) that some live worker runs, ONNX Runtime CPU FP32 first.

    With `info`, int8 targets are listed only for a quantized model: an FP32 model "run in
    int8" would run in FP32 (or be refused), which helps nobody.
    """
    with transaction(factory) as s:
        inventories = [w.inventory for w in live_workers(s, max_age_s=max_age_s)]
    found = {target for inventory in inventories for target in targets(inventory)}
    if info is not None and not info.quantized:
        found = {t for t in found if t[2] != "int8"}
    reference = ("onnxruntime", "cpu", "fp32")
    return sorted(found, key=lambda t: (t != reference, t[1], t[0], t[2]))
