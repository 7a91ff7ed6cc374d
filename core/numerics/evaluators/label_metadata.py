"""Class names a model's metadata lists, read to check a class count against.

Exporters write them under several keys: Ultralytics 'names' ("{0: 'person', 1: 'bicycle'}"),
Hugging Face 'id2label' (a JSON object), 'labels' / 'classes' / 'label_list' / 'class_names'
(a JSON list, or one name a line, or comma-separated), and Paddle's 'character' (one a line),
which a PaddleOCR recognizer uses for its characters and a PaddleDetection model (a PicoDet
layout detector) for its label names. What the list means is the task's to weigh: as many names
as class scores is support for a classifier or a detector; a recognizer needs one class more
than it lists characters (the CTC blank), or two (a space after them).
"""

from __future__ import annotations

import ast
import json
from typing import Any

from optistudio.core.numerics.evaluators.base import ModelFacts
from optistudio.core.numerics.evaluators.evidence import WEAK, Evidence

MAX_NESTING = 32
"""Deepest bracket nesting parsed: a list of names is one or two levels deep."""
LABEL_KEYS = ("names", "id2label", "labels", "classes", "label_list", "class_names", "character")
CHARSET_KEY = "character"


def label_names(facts: ModelFacts) -> tuple[str, list[str]] | None:
    """(key, names) of the first metadata entry that lists names, in LABEL_KEYS order."""
    for key in LABEL_KEYS:
        names = parse_names(facts.metadata.get(key, ""))
        if names:
            return key, names
    return None


def label_evidence(facts: ModelFacts, classes: int | None) -> list[Evidence]:
    """What listed label names say for a task scoring `classes` classes: WEAK support when
    there is one name per class, WEAK evidence against when the count differs; nothing when
    there are no names or the class count is unknown."""
    listed = label_names(facts)
    if listed is None or classes is None:
        return []
    key, names = listed
    if len(names) == classes:
        text = f"the '{key}' metadata lists {len(names)} names, one per class: label names"
        return [Evidence(kind="metadata", weight=WEAK, text=text)]
    text = f"the '{key}' metadata lists {len(names)} names for {classes} classes"
    return [Evidence(kind="metadata", weight=-WEAK, text=text)]


def parse_names(text: str) -> list[str]:
    """Names from a JSON / Python list or {id: name} mapping, else lines, else commas; none
    from brackets nested past MAX_NESTING (a 100,000-deep '[[[...' made json raise
    RecursionError, and the model card said "Internal error")."""
    text = text.strip()
    if not text or (text[0] in "[{" and _nesting(text) > MAX_NESTING):
        return []  # not a list of names: no labels
    parsed = _literal(text)
    if isinstance(parsed, dict):
        return [str(parsed[key]) for key in sorted(parsed, key=_index)]
    if isinstance(parsed, list):
        return [str(item) for item in parsed]
    if "\n" in text:
        return text.splitlines()
    return [part.strip() for part in text.split(",")] if "," in text else [text]


def _literal(text: str) -> Any:
    """The list or mapping `text` writes, or None (a parser's RecursionError included)."""
    if text[0] not in "[{":
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _nesting(text: str) -> int:
    """How deep brackets open, counted over the whole text (quoted ones too: an upper bound)."""
    if sum(text.count(char) for char in "[{(") <= MAX_NESTING:
        return 0  # cannot be deeper than the cap: no need to walk it
    depth = deepest = 0
    for char in text:
        if char in "[{(":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]})":
            depth -= 1
    return deepest


def _index(key: Any) -> tuple[int, str]:
    """Sort keys 0, 1, ..., 10 as numbers ('10' after '9'), others after them by name."""
    try:
        return int(key), ""
    except (TypeError, ValueError):
        return 1 << 30, str(key)
