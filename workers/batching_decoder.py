"""The latency profile job on a decoder with a KV cache: what a decoding step costs per live
batch size and what a prefill costs per prompt length (optistudio.core.llm.serving_whatif).

A decoder is served by batching decode steps, not requests, so its latency per forward pass
says nothing about generation. This job times a step at batch 1, 2, 4, ... up to the spec's
largest batch (capped at DECODE_MAX_BATCH) after a DECODE_CONTEXT-token prompt per row, and
the prefill of one prompt at each of PREFILL_LENGTHS that fits the model's context, on the
spec's backend, device and threads. The Batching page predicts static and continuous serving
from it without running the model.
"""

from __future__ import annotations

from pathlib import Path

from optistudio.core.batching.specs import LatencyProfileSpec
from optistudio.core.errors import InvalidSpec
from optistudio.core.llm.card import DecoderCard, read_card
from optistudio.core.llm.decode import open_decoder
from optistudio.core.llm.serving_whatif import DecodeProfile, measure_decode_profile
from optistudio.core.machine.environment import fingerprint
from optistudio.services.jobresults import LatencyProfileJobResult
from optistudio.workers.jobs import JobContext
from optistudio.workers.outcome import Done

DECODE_MAX_BATCH = 32
"""Most rows per step timed: past it a small decoder's step is bound by the cache it reads,
and a profile past it takes long for a prediction the page extends along the last slope."""
DECODE_STEPS = 32
"""Timed steps per batch size (fewer when the context is short)."""
DECODE_CONTEXT = 16
"""Prompt tokens per row before the timed steps."""
WARMUP_STEPS = 3
PREFILL_LENGTHS = (32, 128, 512)
"""Prompt lengths whose prefill is timed, those that fit the context (as `bench` times TTFT)."""


def decode_profile_job(
    model_path: Path, spec: LatencyProfileSpec, context: JobContext
) -> Done[LatencyProfileJobResult]:
    """Time the decoder at `model_path`'s steps and prefills; the spec's shapes do not apply."""
    card = read_card(model_path)
    sizes = decode_batch_sizes(spec.max_batch_size)
    lengths = prefill_lengths(card)
    options = spec.run_target.session_options()
    context.progress(0.05, f"Timing decode steps at batch {', '.join(map(str, sizes))}")
    session = open_decoder(model_path, backend=spec.backend, options=options, io=card.io)
    try:
        profile = measure_decode_profile(
            session,
            vocab=card.vocab or 2,
            batch_sizes=sizes,
            prompt_lengths=lengths,
            steps=decode_steps(card),
            context=DECODE_CONTEXT,
            warmup_steps=WARMUP_STEPS,
            backend=spec.backend,
            threads=spec.threads,
        )
    finally:
        session.close()
    return Done(
        decode_message(profile, asked=spec.max_batch_size),
        LatencyProfileJobResult(decode_profile=profile),
        environment=fingerprint(threads=spec.threads, extra={"backend": spec.backend}),
    )


def decode_batch_sizes(max_batch_size: int) -> list[int]:
    """1, 2, 4, ... below `max_batch_size` (capped at DECODE_MAX_BATCH), and that size."""
    top = min(max_batch_size, DECODE_MAX_BATCH)
    return [*(1 << k for k in range(top.bit_length()) if 1 << k < top), top]


def prefill_lengths(card: DecoderCard) -> list[int]:
    """PREFILL_LENGTHS that fit the context, else half the context."""
    room = card.context_length
    fitting = [p for p in PREFILL_LENGTHS if room is None or p <= room]
    return fitting or [max(1, (room or 2) // 2)]


def decode_steps(card: DecoderCard) -> int:
    """DECODE_STEPS, or as many as fit the context after the prompt and warm-up."""
    if card.context_length is None:
        return DECODE_STEPS
    room = card.context_length - DECODE_CONTEXT - WARMUP_STEPS
    if room < 2:
        raise InvalidSpec(
            f"Timing decode steps needs at least {DECODE_CONTEXT + WARMUP_STEPS + 2} tokens of "
            f"context, but the model holds {card.context_length} "
            f"({card.sources.get('context_length', 'graph')}).",
            hint="Check the context length in the model's config.json.",
        )
    return min(DECODE_STEPS, room)


def decode_message(profile: DecodeProfile, *, asked: int) -> str:
    """'Timed a decode step at batch 1, 2 and 4 (32 steps after 16 tokens) and prefills of
    32 and 128 tokens: 812.0 tokens/s at batch 1, 2050.3 at 4; prefill 0.49 ms at 32, ...'"""
    sizes, lengths = profile.batch_sizes, profile.prompt_lengths
    steps = len(profile.step_runs_ms[0]) if profile.step_runs_ms else 0
    first, last = sizes[0], sizes[-1]
    speeds = f"{profile.tokens_per_s(first):.1f} tokens/s at batch {first}"
    if last != first:
        speeds += f", {profile.tokens_per_s(last):.1f} at {last}"
    prefill = ", ".join(
        f"{ms:.2f} ms at {p}" for p, ms in zip(lengths, profile.prefill_ms, strict=True)
    )
    message = (
        f"Timed a decode step at batch {_listed(sizes)} ({steps} steps after "
        f"{profile.step_prompt_tokens} prompt tokens) and prefills of {_listed(lengths)} "
        f"tokens: {speeds}; prefill {prefill}."
    )
    if asked > last:
        message += f" Batch capped at {last} (asked {asked}): larger ones extend the last slope."
    return message


def _listed(values: list[int]) -> str:
    words = [str(v) for v in values]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"
