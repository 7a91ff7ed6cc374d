"""Prefill and greedy decoding with the KV cache carried between steps, on any backend.

A step feeds `S` new tokens with the cache of the `P` tokens before them: `input_ids` [B, S],
`attention_mask` ones [B, P + S], `position_ids` P..P+S-1, and each layer's past key and value
[B, kv_heads, P, head_dim]; it returns logits [B, S, vocab] and presents [B, kv_heads, P + S,
head_dim], which become the next step's pasts. The prefill is the first step (P = 0, empty
pasts, S = the prompt); every later step feeds the one token chosen last (S = 1). Greedy picks
the argmax of the last position's logits.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from optistudio.core.backends.base import LoadedModel, SessionOptions, get_backend
from optistudio.core.errors import InferenceFailed, InvalidSpec
from optistudio.core.llm.decoder import DecoderIO, load_decoder_io


@dataclass
class KVCache:
    """Each layer's key and value [B, kv_heads, length, head_dim], as the last step returned."""

    keys: list[np.ndarray]
    values: list[np.ndarray]

    @property
    def length(self) -> int:
        return int(self.keys[0].shape[2])


@dataclass
class Generation:
    """What greedy decoding produced and how long each part took."""

    tokens: np.ndarray
    """[B, new_tokens] the tokens chosen, the first from the prefill."""
    prefill_s: float
    """Seconds from feeding the prompt to having the first token (TTFT)."""
    step_s: list[float] = field(default_factory=list)
    """Seconds of each later step (one token per sequence each)."""


class DecoderSession:
    """A decoder loaded on one backend, run step by step."""

    def __init__(self, loaded: LoadedModel, io: DecoderIO) -> None:
        self.loaded = loaded
        self.io = io
        self._index = {name: i for i, name in enumerate(io.outputs)}

    def empty_cache(self, batch: int) -> KVCache:
        return empty_cache(self.io, batch)

    def step(
        self,
        ids: np.ndarray,
        cache: KVCache,
        *,
        attention_mask: np.ndarray | None = None,
        position_ids: np.ndarray | None = None,
    ) -> tuple[np.ndarray, KVCache]:
        """Logits [B, S, vocab] for `ids` [B, S] after the tokens in `cache`, and the new cache.
        `attention_mask` [B, past + S] and `position_ids` [B, S] default to ones and P..P+S-1
        (no padding); a batch of sequences of different lengths passes its own (left padding:
        optistudio.core.llm.batched_decode)."""
        feeds = self._feeds(ids, cache)
        if attention_mask is not None:
            feeds[self.io.attention_mask] = attention_mask.astype(np.int64, copy=False)
        if position_ids is not None and self.io.position_ids is not None:
            feeds[self.io.position_ids] = position_ids.astype(np.int64, copy=False)
        outputs = self.loaded.run(feeds)
        keys = [outputs[self._index[name]] for name in self.io.present_keys]
        values = [outputs[self._index[name]] for name in self.io.present_values]
        return outputs[self._index[self.io.logits]], KVCache(keys=keys, values=values)

    def logits(self, ids: np.ndarray) -> np.ndarray:
        """Logits of a whole sequence [B, T] in one step from an empty cache (no decoding)."""
        return self.step(ids, self.empty_cache(ids.shape[0]))[0]

    def close(self) -> None:
        self.loaded.close()

    def _feeds(self, ids: np.ndarray, cache: KVCache) -> dict[str, np.ndarray]:
        return step_feeds(self.io, ids, cache)


def empty_cache(io: DecoderIO, batch: int) -> KVCache:
    """The cache before the first token: every layer's key and value with 0 positions."""
    layout = io.cache
    shape = (batch, layout.kv_heads, 0, layout.head_dim)
    empty = [np.zeros(shape, dtype=layout.dtype) for _ in range(io.layers)]
    return KVCache(keys=empty, values=[a.copy() for a in empty])


def step_feeds(io: DecoderIO, ids: np.ndarray, cache: KVCache) -> dict[str, np.ndarray]:
    """What one step feeds (module docstring): `ids` [B, S] after the cache's P tokens."""
    batch, new = ids.shape
    past = cache.length
    feeds = {
        io.input_ids: ids.astype(np.int64, copy=False),
        io.attention_mask: np.ones((batch, past + new), dtype=np.int64),
    }
    if io.position_ids is not None:
        positions = np.arange(past, past + new, dtype=np.int64)
        feeds[io.position_ids] = np.broadcast_to(positions, (batch, new)).copy()
    feeds |= dict(zip(io.past_keys, cache.keys, strict=True))
    feeds |= dict(zip(io.past_values, cache.values, strict=True))
    return feeds


def open_decoder(
    path: Path,
    *,
    backend: str = "onnxruntime",
    options: SessionOptions | None = None,
    io: DecoderIO | None = None,
) -> DecoderSession:
    """The decoder at `path` loaded on `backend`. `io` is the interface read from the ONNX
    original: an OpenVINO IR (.xml) variant keeps the names but is not ONNX, so it needs it."""
    if io is None:
        if path.suffix != ".onnx":
            raise InvalidSpec(
                f"{path.name} is not an ONNX file, so its decoding interface cannot be read.",
                hint="Pass the interface read from its ONNX original (load_decoder_io).",
            )
        io = load_decoder_io(path)
    loaded = get_backend(backend).load(path, options or SessionOptions())
    return DecoderSession(loaded, io)


def greedy(session: DecoderSession, prompt: np.ndarray, new_tokens: int) -> Generation:
    """Greedy decoding of `new_tokens` tokens after `prompt` [B, P], timing every step."""
    if prompt.ndim != 2 or prompt.shape[1] == 0 or new_tokens < 1:
        raise InvalidSpec(
            f"Decoding needs a prompt [batch, tokens] of at least one token and at least one new "
            f"token; got a prompt of shape {list(prompt.shape)} and {new_tokens} new tokens."
        )
    start = time.perf_counter()
    logits, cache = session.step(prompt, session.empty_cache(prompt.shape[0]))
    chosen = [argmax_last(logits)]
    prefill_s = time.perf_counter() - start
    step_s = []
    for _ in range(new_tokens - 1):
        start = time.perf_counter()
        logits, cache = session.step(chosen[-1][:, None], cache)
        chosen.append(argmax_last(logits))
        step_s.append(time.perf_counter() - start)
    return Generation(tokens=np.stack(chosen, axis=1), prefill_s=prefill_s, step_s=step_s)


def argmax_last(logits: np.ndarray) -> np.ndarray:
    if logits.ndim != 3:
        raise InferenceFailed(
            f"The decoder returned logits of shape {list(logits.shape)}, not [batch, tokens, "
            "vocab]."
        )
    return np.asarray(logits[:, -1].argmax(axis=-1), dtype=np.int64)
