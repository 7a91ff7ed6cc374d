"""Greedy decoding of many sequences of different lengths in one batch, the KV cache shared.

The batch is left-padded: row r holds its L_r real tokens in the last L_r of T cache columns,
`attention_mask[r, t]` = 0 on the T - L_r columns before them and 1 after, and its positions
count only its own tokens (`position_ids` = L_r for its next token). A padded key is masked
out of every query, so each row's logits are what the sequence alone gives (up to the rounding
of a wider matrix product), whatever the other rows hold.

- `admit(prompts)`: the prompts' prefill as one left-padded batch [n, max P]; their caches join
  the batch's, every row padded on the left to the longer of the two lengths;
- `step()`: one token for every row (its last one fed back), the mask one column longer;
- `retire(rows)`: drop finished rows; columns no remaining row sees (all-zero mask) are cut
  from the left, so the cache is as long as the longest live sequence, not the oldest.

Admit and retire between steps are what continuous (in-flight) batching needs: a finished
sequence's place is taken by a new one at the next step, and the rows stay left-padded.
A decoder without a `position_ids` input computes positions itself (from the cache length),
which left padding would shift: it takes only batches without padding (equal lengths).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from optistudio.core.errors import InvalidSpec
from optistudio.core.llm.decode import DecoderSession, KVCache, argmax_last


class BatchedDecoder:
    """The live rows of a batch on one decoder session: their cache, mask, positions and the
    last token each chose."""

    def __init__(self, session: DecoderSession) -> None:
        self.session = session
        self.cache: KVCache | None = None
        self.mask = np.zeros((0, 0), dtype=np.int64)
        self.positions = np.zeros(0, dtype=np.int64)
        self.last = np.zeros(0, dtype=np.int64)

    @property
    def rows(self) -> int:
        return len(self.last)

    @property
    def length(self) -> int:
        """Cache columns (the longest live sequence, padding included)."""
        return int(self.mask.shape[1])

    def admit(self, prompts: Sequence[np.ndarray]) -> np.ndarray:
        """Prefill `prompts` (1-D token ids) as new rows at the end; their first tokens [n]."""
        ids, mask = left_padded(prompts)
        self._check_padding(mask)
        positions = positions_of(mask)
        logits, cache = self.session.step(
            ids, self.session.empty_cache(len(prompts)), attention_mask=mask, position_ids=positions
        )
        first = argmax_last(logits)
        self._join(cache, mask, positions[:, -1] + 1, first)
        return first

    def step(self) -> np.ndarray:
        """One greedy step of every row; the tokens chosen [rows]."""
        if self.cache is None or not self.rows:
            raise InvalidSpec("A decoding step needs at least one admitted sequence.")
        mask = np.concatenate([self.mask, np.ones((self.rows, 1), dtype=np.int64)], axis=1)
        logits, self.cache = self.session.step(
            self.last[:, None],
            self.cache,
            attention_mask=mask,
            position_ids=self.positions[:, None],
        )
        self.mask, self.positions = mask, self.positions + 1
        self.last = argmax_last(logits)
        return self.last

    def retire(self, rows: Sequence[int]) -> None:
        """Drop the rows at these indices (the others keep their order)."""
        keep = np.setdiff1d(np.arange(self.rows), np.asarray(rows, dtype=np.int64))
        if self.cache is not None:
            self.cache = KVCache(
                keys=[k[keep] for k in self.cache.keys],
                values=[v[keep] for v in self.cache.values],
            )
        self.mask, self.positions, self.last = (
            self.mask[keep],
            self.positions[keep],
            self.last[keep],
        )
        self._trim()

    def _join(
        self, cache: KVCache, mask: np.ndarray, positions: np.ndarray, first: np.ndarray
    ) -> None:
        if self.cache is None or not self.rows:
            self.cache, self.mask, self.positions, self.last = cache, mask, positions, first
            return
        length = max(self.length, mask.shape[1])
        old, new = _padded(self.cache, self.mask, length), _padded(cache, mask, length)
        mask = np.concatenate([old[1], new[1]], axis=0)
        self._check_padding(mask)
        self.cache = KVCache(
            keys=[
                np.concatenate(pair, axis=0) for pair in zip(old[0].keys, new[0].keys, strict=True)
            ],
            values=[
                np.concatenate(pair, axis=0)
                for pair in zip(old[0].values, new[0].values, strict=True)
            ],
        )
        self.mask = mask
        self.positions = np.concatenate([self.positions, positions])
        self.last = np.concatenate([self.last, first])

    def _trim(self) -> None:
        """Cut the leading columns no row sees."""
        if not self.rows or self.cache is None:
            return
        seen = np.flatnonzero(self.mask.any(axis=0))
        start = int(seen[0]) if len(seen) else self.length
        if start:
            self.mask = self.mask[:, start:]
            self.cache = KVCache(
                keys=[k[:, :, start:] for k in self.cache.keys],
                values=[v[:, :, start:] for v in self.cache.values],
            )

    def _check_padding(self, mask: np.ndarray) -> None:
        if self.session.io.position_ids is None and not mask.all():
            raise InvalidSpec(
                "This decoder has no position_ids input: it counts positions itself, so "
                "sequences of different lengths cannot share a batch (left padding would shift "
                "them).",
                hint="Batch sequences of equal length, or export the decoder with position_ids "
                "(Optimum and ONNX Runtime GenAI's model builder do by default).",
            )


def left_padded(prompts: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids [n, max P] with each prompt at the right end (0 before it) and their mask."""
    lengths = [len(p) for p in prompts]
    if not prompts or min(lengths) == 0:
        raise InvalidSpec(
            f"A batch needs at least one prompt, each of at least one token; got lengths {lengths}."
        )
    width = max(lengths)
    ids = np.zeros((len(prompts), width), dtype=np.int64)
    mask = np.zeros((len(prompts), width), dtype=np.int64)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = prompt
        mask[row, width - len(prompt) :] = 1
    return ids, mask


def positions_of(mask: np.ndarray) -> np.ndarray:
    """Each token's position among its row's real tokens (0 on padding)."""
    return np.maximum(np.cumsum(mask, axis=1) - 1, 0).astype(np.int64)


def _padded(cache: KVCache, mask: np.ndarray, length: int) -> tuple[KVCache, np.ndarray]:
    """`cache` and `mask` padded on the left (time axis) to `length` columns."""
    extra = length - mask.shape[1]
    if extra == 0:
        return cache, mask

    def pad(array: np.ndarray) -> np.ndarray:
        return np.pad(array, ((0, 0), (0, 0), (extra, 0), (0, 0)))

    return (
        KVCache(keys=[pad(k) for k in cache.keys], values=[pad(v) for v in cache.values]),
        np.pad(mask, ((0, 0), (extra, 0))),
    )


def greedy_batched(
    session: DecoderSession, prompts: Sequence[np.ndarray], new_tokens: Sequence[int]
) -> list[np.ndarray]:
    """Static batching: all `prompts` prefilled together, then decoded in one batch until each
    has its own number of `new_tokens` (a finished row leaves the batch); the tokens of each."""
    if len(new_tokens) != len(prompts) or min(new_tokens, default=0) < 1:
        raise InvalidSpec(
            f"Each of the {len(prompts)} prompts needs at least one new token; got {list(new_tokens)}."
        )
    batch = BatchedDecoder(session)
    chosen: list[list[int]] = [[int(t)] for t in batch.admit(prompts)]
    live = [i for i in range(len(prompts)) if new_tokens[i] > 1]
    batch.retire([i for i in range(len(prompts)) if new_tokens[i] == 1])
    while live:
        tokens = batch.step()
        for row, i in enumerate(live):
            chosen[i].append(int(tokens[row]))
        done = [row for row, i in enumerate(live) if len(chosen[i]) == new_tokens[i]]
        batch.retire(done)
        live = [i for row, i in enumerate(live) if row not in done]
    return [np.array(tokens, dtype=np.int64) for tokens in chosen]
