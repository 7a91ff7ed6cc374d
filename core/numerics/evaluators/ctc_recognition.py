"""Whether a model is a CTC text recognizer: its case, weighed item by item (`evidence`).

Per output, the graph first:

- per-step class scores [N, T, C] (C >= 10 fixed classes) after a Softmax / LogSoftmax on the
  last axis: STRONG; a float [N, T, C] made otherwise (raw logits, or any sequence of vectors:
  a ViT's tokens, a detector's box distributions): WEAK; a softmax over another axis (T) counts
  WEAK against;
- class ids [N, T] made by an ArgMax: STRONG; integers [N, T] made otherwise: WEAK;
- more than one other output: WEAK against (a recognizer returns its scores, maybe their ids).

Then the input: a text-line image (a fixed height of 16..64 pixels, the width dynamic or at least
twice the height, as PP-OCR's 48 x 320) or audio (CTC speech recognizers) is WEAK support; token
ids WEAK against. A page-sized image says nothing: detectors take those too.

Then the metadata. PaddleOCR lists its characters under 'character', one a line: class 0 is the
blank, classes 1..L the L characters, and maybe a space after them, so C = L + 1 or L + 2 is
MODERATE support and any other C MODERATE evidence against. That is what keeps a PaddleDetection
model (a PicoDet layout detector, which lists its 5 label names there) from being read as a
recognizer through its box distributions [N, cells, 32]. Over ids the count cannot be checked,
and the list is WEAK support. A list on a model no output of which fits is a case of metadata
alone, and never decides.
"""

from __future__ import annotations

from optistudio.core.numerics.evaluators.base import Case, ModelFacts, OutputFacts, Recognition
from optistudio.core.numerics.evaluators.evidence import MODERATE, STRONG, WEAK, Evidence
from optistudio.core.numerics.evaluators.input_kinds import input_kind
from optistudio.core.numerics.evaluators.outputs import (
    is_float,
    made_by,
    on_last_axis,
    shape_text,
    size,
    strongest,
)

MIN_CLASSES = 10
"""Fewer classes than this over [N, T, C] is not an alphabet (a sequence tagger, boxes...)."""
INT_DTYPES = frozenset({"int64", "int32", "int16", "int8", "uint8", "uint16", "uint32", "uint64"})
CHARSET_KEY = "character"
SOFTMAX_OPS = frozenset({"Softmax", "LogSoftmax"})
LINE_HEIGHTS = range(16, 65)


def charset(facts: ModelFacts) -> list[str] | None:
    """The characters of a PaddleOCR 'character' list (one a line), or None."""
    text = facts.metadata.get(CHARSET_KEY)
    return text.splitlines() if text else None


def holds_ids(output: OutputFacts) -> bool:
    """Whether an output holds class ids: integers, or made by an ArgMax."""
    return output.dtype in INT_DTYPES or output.producer == "ArgMax"


def ctc_case(task: str, facts: ModelFacts) -> Case | None:
    """The strongest output's case for CTC text recognition (module docstring); with no output
    that fits, the case of a 'character' list alone; None when nothing speaks for it."""
    characters = charset(facts)
    found = strongest(_output_case(task, output, facts, characters) for output in facts.outputs)
    if found is not None or characters is None:
        return found
    text = f"a '{CHARSET_KEY}' list of {len(characters)} entries in the metadata"
    return Case(
        recognition=Recognition(task=task, reason=text, outputs=[], vocabulary=characters),
        evidence=[Evidence(kind="metadata", weight=WEAK, text=text)],
    )


def _output_case(
    task: str, output: OutputFacts, facts: ModelFacts, characters: list[str] | None
) -> Case | None:
    read = _ids_evidence(output, characters) or _scores_evidence(output, characters)
    if read is None:
        return None
    reason, evidence = read
    evidence += _input_evidence(facts) + _others_evidence(output, facts)
    recognition = Recognition(
        task=task, reason=reason, outputs=[output.name], vocabulary=characters
    )
    return Case(recognition=recognition, evidence=evidence)


def _ids_evidence(
    output: OutputFacts, characters: list[str] | None
) -> tuple[str, list[Evidence]] | None:
    """[N, T] class ids: by an ArgMax (STRONG) or integers (WEAK), the charset WEAK."""
    if len(output.shape) != 2 or not holds_ids(output):
        return None
    shape = shape_text(output.shape, "NT")
    if output.producer == "ArgMax":
        text = f"{output.name} {shape} of class ids made by ArgMax inside the model"
        reason = (
            f"{text}: a CTC text recognizer (greedy decoding collapses repeats and drops blanks)"
        )
        evidence = [Evidence(kind="structure", weight=STRONG, text=text)]
    else:
        text = f"{output.name} {shape} of integers: maybe class ids"
        reason = (
            f"{output.name} {shape} of integer class ids, with a '{CHARSET_KEY}' list in the "
            "metadata: a CTC text recognizer (PaddleOCR)"
        )
        evidence = [Evidence(kind="structure", weight=WEAK, text=text)]
    if characters is not None:
        listed = f"a '{CHARSET_KEY}' list of {len(characters)} characters to read them with"
        evidence.append(Evidence(kind="metadata", weight=WEAK, text=listed))
    return reason, evidence


def _scores_evidence(
    output: OutputFacts, characters: list[str] | None
) -> tuple[str, list[Evidence]] | None:
    """[N, T, C] float scores: after a softmax on C (STRONG) or not (WEAK), the charset's count
    against C (MODERATE either way)."""
    classes = size(output.shape[2]) if len(output.shape) == 3 else None
    if classes is None or classes < MIN_CLASSES or not is_float(output):
        return None
    shape = shape_text(output.shape, "NTC")
    made = f"{output.name} {shape} after {made_by(output)}"
    if output.producer in SOFTMAX_OPS and on_last_axis(output):
        made += " on the last axis"
        evidence = [Evidence(kind="structure", weight=STRONG, text=f"{made}: per-step scores")]
    else:
        text = f"{made}: per-step scores, or any sequence of vectors"
        evidence = [Evidence(kind="structure", weight=WEAK, text=text)]
        if output.producer in SOFTMAX_OPS:
            over = f"the softmax runs over axis {output.producer_axis}, not the classes"
            evidence.append(Evidence(kind="structure", weight=-WEAK, text=over))
    matching = _charset_evidence(characters, classes)
    evidence += matching
    listed = matching and matching[0].weight > 0
    with_list = f", with a '{CHARSET_KEY}' list in the metadata" if listed else ""
    return f"{made}{with_list}: a CTC text recognizer{' (PaddleOCR)' if listed else ''}", evidence


def _charset_evidence(characters: list[str] | None, classes: int) -> list[Evidence]:
    if characters is None:
        return []
    count = len(characters)
    if classes in (count + 1, count + 2):
        extra = "the blank" + (" and a space" if classes == count + 2 else "")
        text = f"the '{CHARSET_KEY}' list has {count} entries: with {extra}, the {classes} classes"
        return [Evidence(kind="metadata", weight=MODERATE, text=text)]
    text = (
        f"the '{CHARSET_KEY}' list has {count} entries, where {classes} classes would need "
        f"{classes - 2} or {classes - 1}: not this output's alphabet"
    )
    return [Evidence(kind="metadata", weight=-MODERATE, text=text)]


def _input_evidence(facts: ModelFacts) -> list[Evidence]:
    kind, name = input_kind(facts)
    shape = facts.input_shapes.get(name, [])
    shown = f"{name} {shape_text(shape, 'NCHW' if kind == 'image' else 'N')}"
    if kind == "image" and _text_line(shape):
        return [Evidence(kind="input", weight=WEAK, text=f"{shown}: a text-line image")]
    if kind == "audio":
        return [Evidence(kind="input", weight=WEAK, text=f"{shown}: audio")]
    if kind == "tokens":
        return [Evidence(kind="input", weight=-WEAK, text=f"{shown}: token ids, not a line")]
    return []


def _text_line(shape: list) -> bool:
    """An NCHW image of a fixed text-line height, its width dynamic or >= twice the height."""
    height, width = size(shape[2]), size(shape[3])
    return height in LINE_HEIGHTS and (width is None or width >= 2 * height)


def _others_evidence(output: OutputFacts, facts: ModelFacts) -> list[Evidence]:
    others = len(facts.outputs) - 1
    if others < 2:
        return []
    text = f"{others} other outputs beside {output.name}: a recognizer returns its scores"
    return [Evidence(kind="structure", weight=-WEAK, text=text)]
