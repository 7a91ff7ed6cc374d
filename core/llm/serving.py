"""`bench` on a decoder: how fast one model serves text, in one report.

TTFT at each prompt length (batch 1) and greedy decoding at each batch size, with the model's
size on disk, the process's peak resident memory while it ran and the environment it was measured in (CPU model, ISA flags, threads, library
versions): the figures and what they were measured on travel together. The math of each figure
is in optistudio.core.llm.timing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.backends.base import SessionOptions
from optistudio.core.errors import InvalidSpec
from optistudio.core.llm.card import DecoderCard, read_card, size_on_disk
from optistudio.core.llm.decode import open_decoder
from optistudio.core.llm.timing import DecodeTiming, PrefillTiming, time_decode, time_prefill
from optistudio.core.machine.environment import fingerprint


class DecoderBenchSettings(BaseModel):
    """What a decoder benchmark measures."""

    model_config = ConfigDict(extra="forbid")

    prompt_lengths: list[int] = Field(
        default=[32, 128, 512], min_length=1, description="Prompt tokens for TTFT (batch 1)."
    )
    batches: list[int] = Field(
        default=[1, 4], min_length=1, description="Batch sizes for greedy decoding."
    )
    steps: int = Field(default=64, ge=1, le=4096, description="Timed decoding steps.")
    decode_prompt: int = Field(
        default=16, ge=1, description="Prompt tokens before the timed decoding steps."
    )
    repeats: int = Field(default=5, ge=1, le=100, description="Prefills per prompt length.")


def settings_for(card: DecoderCard, *, batches: list[int] | None = None) -> DecoderBenchSettings:
    """The default benchmark for this decoder: the default prompt lengths that fit its context
    (at least the shortest), at `batches` (default 1 and 4)."""
    defaults = DecoderBenchSettings()
    context = card.context_length
    fitting = [p for p in defaults.prompt_lengths if context is None or p <= context]
    return DecoderBenchSettings(
        prompt_lengths=fitting or defaults.prompt_lengths[:1],
        batches=batches or defaults.batches,
    )


class DecoderBenchReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: str
    size_bytes: int
    prefill: list[PrefillTiming]
    decode: list[DecodeTiming]
    environment: dict[str, Any]
    peak_rss_mb: float | None = Field(
        default=None,
        description="Most resident memory of the process while it ran (model, cache and "
        "runtime; sampled after each timing); None in reports stored before it was measured.",
    )
    model_rss_mb: float | None = Field(
        default=None, description="Resident memory loading the decoder added."
    )


def benchmark_decoder(
    path: Path,
    *,
    backend: str = "onnxruntime",
    settings: DecoderBenchSettings | None = None,
    options: SessionOptions | None = None,
    card: DecoderCard | None = None,
) -> DecoderBenchReport:
    """TTFT and decoding speed of the decoder at `path` on `backend`. `card` is the original's
    (an OpenVINO IR variant is not ONNX and cannot be read for one)."""
    settings = settings or DecoderBenchSettings()
    card = card or read_card(path)
    _check_context(card, settings)
    options = options or SessionOptions()
    before = _rss_mb()
    session = open_decoder(path, backend=backend, options=options, io=card.io)
    loaded = _rss_mb()
    peak = loaded
    vocab = card.vocab or 2
    try:
        prefill = []
        for length in settings.prompt_lengths:
            prefill.append(time_prefill(session, length, vocab, repeats=settings.repeats))
            peak = max(peak, _rss_mb())
        decode = []
        for b in settings.batches:
            decode.append(
                time_decode(
                    session,
                    vocab,
                    batch=b,
                    steps=settings.steps,
                    prompt_tokens=settings.decode_prompt,
                )  # fmt: skip
            )
            peak = max(peak, _rss_mb())
    finally:
        session.close()
    return DecoderBenchReport(
        backend=backend,
        size_bytes=size_on_disk(path),
        prefill=prefill,
        decode=decode,
        environment=fingerprint(threads=options.threads, extra={"backend": backend}),
        peak_rss_mb=peak,
        model_rss_mb=max(loaded - before, 0.0),
    )


def _rss_mb() -> float:
    return float(psutil.Process().memory_info().rss / 2**20)


def _check_context(card: DecoderCard, settings: DecoderBenchSettings) -> None:
    longest = max(max(settings.prompt_lengths), settings.decode_prompt + settings.steps + 8)
    if card.context_length is not None and longest > card.context_length:
        raise InvalidSpec(
            f"The benchmark needs {longest} tokens of context but the model holds "
            f"{card.context_length} ({card.sources.get('context_length', 'graph')}).",
            hint="Use shorter prompt lengths or fewer steps.",
        )
