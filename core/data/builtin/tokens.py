"""Token ids of real sentences, for models that take ids (input_ids) rather than text.

No tokenizer ships with an ONNX file, so the words are not tokenized as the model's own
vocabulary would: each word of the corpus's sentences (`corpus.sentences`, Python's docstrings)
maps to one id by a stable hash, CRC-32 of its lower-cased spelling,

    id(word) = low + crc32(word) mod (vocab - low)

with low = 1000 for a vocabulary of more than 5000 ids (BERT-like vocabularies keep padding,
special and unused tokens below 1000) and 1 otherwise (0 is padding). So a word is the same id
wherever it occurs and ids follow real word frequencies and sentence lengths, but they are not
the ids the model's tokenizer would give: agreement on them says how a variant treats real-looking
id sequences, not how it reads the sentences. A row of T ids packs consecutive sentences from a
random start (a new sentence where one ends), with the attention mask all ones.

The vocabulary size is read from the graph: the rows of the embedding table a Gather looks the
ids up in (through Cast ops). Without one the ids stay below TOKEN_ID_LIMIT, as synthesised ids.
"""

from __future__ import annotations

import re
import zlib

import numpy as np
import onnx

from optistudio.core.data.builtin.corpus import sentences
from optistudio.core.data.inputs import TOKEN_ID_LIMIT

LARGE_VOCAB = 5000
RESERVED_IDS = 1000
_WORD = re.compile(r"[A-Za-z]+|\d+|[^\sA-Za-z\d]")


def word_id(word: str, vocab: int) -> int:
    """The id a word hashes to within a vocabulary of `vocab` ids (module docstring)."""
    low = RESERVED_IDS if vocab > LARGE_VOCAB else min(1, vocab - 1)
    return low + zlib.crc32(word.lower().encode()) % max(1, vocab - low)


def token_row(index: int, length: int, vocab: int, seed: int = 0) -> np.ndarray:
    """Row `index`: `length` ids of consecutive sentences from a random start, int64."""
    rng = np.random.default_rng([seed, index, 3])
    found = sentences()
    start = int(rng.integers(len(found)))
    ids: list[int] = []
    offset = 0
    while len(ids) < length:
        sentence = found[(start + offset) % len(found)]
        ids += [word_id(word, vocab) for word in _WORD.findall(sentence)]
        offset += 1
    return np.asarray(ids[:length], dtype=np.int64)


def vocab_size(model: onnx.ModelProto, input_name: str) -> int | None:
    """Rows of the embedding table the input's ids index (a Gather's data initializer,
    looked up through Cast), or None when the graph shows none."""
    tables = {t.name: t for t in model.graph.initializer}
    names = {input_name}
    for node in model.graph.node:
        if node.op_type == "Cast" and node.input and node.input[0] in names:
            names.add(node.output[0])
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] in names:
            table = tables.get(node.input[0])
            if table is not None and len(table.dims) == 2:
                return int(table.dims[0])
    return None


def id_limit(model: onnx.ModelProto | None, input_name: str) -> tuple[int, str]:
    """The vocabulary the ids are hashed into, and where that size came from."""
    found = vocab_size(model, input_name) if model is not None else None
    if found:
        return found, f"vocabulary of {found} (the embedding table's rows)"
    return TOKEN_ID_LIMIT, f"ids below {TOKEN_ID_LIMIT} (no embedding table found)"
