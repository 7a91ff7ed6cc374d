"""Real English text from Python's own standard library: its modules' docstrings.

Written by people for people, shipped with every Python, read without importing more than the
modules named here (all pure standard library). The text is the same for one Python release on
every machine; sentences and words come in the order the modules are listed.
"""

from __future__ import annotations

import importlib
import re
from functools import cache

MODULES = (
    "argparse",
    "collections",
    "csv",
    "difflib",
    "functools",
    "json",
    "logging",
    "pathlib",
    "shutil",
    "string",
    "tarfile",
    "textwrap",
    "unittest",
    "zipfile",
)
"""Modules whose docstrings (module, public classes and functions) make the corpus."""
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"[A-Za-z][a-z]{1,14}")
MIN_WORDS = 4
MAX_CHARS = 240
_PROSE = re.compile(r"[A-Za-z ,.;:'!?-]")
"""Characters of prose; a sentence with fewer than 95 % of them is code or a table."""


@cache
def sentences() -> tuple[str, ...]:
    """Sentences of at least MIN_WORDS words from the docstrings, whitespace collapsed."""
    found = []
    for text in _docstrings():
        for sentence in _SENTENCE.split(" ".join(text.split())):
            if _is_prose(sentence):
                found.append(sentence)
    return tuple(found)


@cache
def words() -> tuple[str, ...]:
    """The sentences' words (letters only, 2-15 long), in order, repeats kept."""
    return tuple(word for sentence in sentences() for word in _WORD.findall(sentence))


def _is_prose(sentence: str) -> bool:
    prose = len(_PROSE.findall(sentence)) >= 0.95 * len(sentence) and ">>>" not in sentence
    return prose and len(sentence) <= MAX_CHARS and len(_WORD.findall(sentence)) >= MIN_WORDS


def _docstrings() -> list[str]:
    texts = []
    for name in MODULES:
        module = importlib.import_module(name)
        texts.append(module.__doc__ or "")
        public = sorted(key for key in vars(module) if not key.startswith("_"))
        for key in public:
            member = getattr(module, key)
            if callable(member) and getattr(member, "__module__", None) == name:
                texts.append(member.__doc__ or "")
    return texts
