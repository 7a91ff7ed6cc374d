"""The backends a form offers: those the live workers run, among those the job's spec takes.

A form that runs a model lists backends from the workers' inventory (the Hardware page's
targets), not from a list of its own, so a backend appears where a worker can run it. A spec
whose `backend` field is a closed set (a Literal, as the operator profile's runtimes with a
profiler) narrows the list to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args, get_origin

from pydantic import BaseModel

from optistudio.core.backends.target import RunTarget

DEFAULT_BACKEND: str = RunTarget.model_fields["backend"].default


def spec_backends(spec: type[BaseModel]) -> list[str] | None:
    """The backends `spec` takes when its field is a closed set (in its order), else None."""
    annotation = spec.model_fields["backend"].annotation
    return list(get_args(annotation)) if get_origin(annotation) is Literal else None


def backend_choices(
    targets: Sequence[tuple[str, str, str]], spec: type[BaseModel], *, device: str = "cpu"
) -> list[str]:
    """Backend names to offer for `spec` on `device`: the default backend first, then the others
    the live workers run there (`targets`: their (backend, device, precision)), in their order.
    With no live worker there: the spec's closed set, else the default backend alone (sending
    then says that no worker runs it)."""
    allowed = spec_backends(spec)
    live = [backend for backend, where, _ in targets if where == device]
    ordered = sorted(dict.fromkeys(live), key=lambda backend: backend != DEFAULT_BACKEND)
    offered = [b for b in ordered if allowed is None or b in allowed]
    return offered or allowed or [DEFAULT_BACKEND]
