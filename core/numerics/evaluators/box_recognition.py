"""Which outputs of a model are a detector's, read from the declared shapes and their producers.

Recognition picks the outputs and says why; how they are read is decided again from the arrays
a run returns (`box_layouts`). In the order tried:

- split: an output of boxes [N, K, 4] / [K, 4] (named like 'box', or the one batched [N, K, 4])
  with scores named like score / conf / prob ([N, K], or per class [N, K, C] / [N, C, K]) and
  maybe classes named like label / class;
- raw predictions before NMS, one rank-3 float output made by a Concat (of the boxes and the
  scores, as the YOLO heads end): [N, 4 + C, A] (YOLOv8 / v11, anchors last) or [N, A, 5 + C]
  (YOLOv5 / YOLOX, anchors first), where A, the larger axis, counts the anchors of grids at
  strides 8, 16, 32 (a multiple of 21: 16 + 4 + 1 cells per 32 x 32 pixels) or 8 .. 64 (a
  multiple of 85); a dynamic anchor axis only when the output is named like an output or
  prediction;
- NMS rows: [N, K, 5 or 6] / [K, 5 or 6] named like box / det, or an unnamed [N, K, 6] not made
  by a softmax; [K, 7] (batch index first) named so or made by a Concat;
- heads (PicoDet-style, before decoding): two or more pairs of a Sigmoid's class scores
  [N, A_i, C] and box distributions [N, A_i, 4 (R + 1)] sharing the cell count A_i, one count
  per head; picked as scores_0, boxes_0, scores_1, boxes_1, ...
"""

from __future__ import annotations

from collections.abc import Callable

from optistudio.core.numerics.evaluators.base import ModelFacts, OutputFacts
from optistudio.core.numerics.evaluators.outputs import (
    is_float,
    named_like,
    output_named,
    shape_text,
    size,
)

Found = tuple[list[str], str]
"""The outputs picked, in the tally's order, and the reason."""
ROW_COLUMNS = {
    5: "x1, y1, x2, y2, score",
    6: "x1, y1, x2, y2, score, class",
    7: "batch index, x1, y1, x2, y2, class, score",
}
SOFTMAX_OPS = frozenset({"Softmax", "LogSoftmax"})
GRIDS = {21: "strides 8, 16 and 32", 85: "strides 8, 16, 32 and 64"}
BOX_SHAPES = "[N, K, 4] or [K, 4]"


def detector_outputs(facts: ModelFacts) -> Found | None:
    """The detector's outputs and why (module docstring), or None."""
    for find in (split_layout, raw_layout, rows_layout, heads_layout):
        found = find(facts)
        if found is not None:
            return found
    return None


def split_layout(facts: ModelFacts) -> Found | None:
    """Boxes, scores and maybe classes as separate outputs, found by name and shape."""
    boxes = _box_output(facts)
    if boxes is None:
        return None
    rank = len(boxes.shape)
    scores = _partner(facts, rank, ("score", "conf", "prob"), per_class=True)
    if scores is None:
        return None
    classes = _partner(facts, rank, ("label", "class"), exclude=scores)
    picked = [boxes, scores] + ([classes] if classes is not None else [])
    letters = "NKC" if rank == 3 else "KC"  # unbatched: one image's K boxes per run
    described = " and ".join(f"{o.name} {shape_text(o.shape, letters)}" for o in picked)
    what = " per class (suppressed by NMS here)" if len(scores.shape) == rank else ""
    return [o.name for o in picked], (
        f"{described}: boxes (x1, y1, x2, y2) with scores{what}"
        f"{' and classes' if classes is not None else ''}: an object detector"
    )


def _box_output(facts: ModelFacts) -> OutputFacts | None:
    fours = [
        o
        for o in facts.outputs
        if len(o.shape) in (2, 3) and size(o.shape[-1]) == 4 and is_float(o)
    ]
    named = [o for o in fours if named_like(o, "box")]
    if named:
        return named[0]
    # unnamed: only a batched [N, K, 4], and only one (an [N, 4] may be four class scores)
    return fours[0] if len(fours) == 1 and len(fours[0].shape) == 3 else None


def _partner(
    facts: ModelFacts,
    rank: int,
    words: tuple[str, ...],
    *,
    per_class: bool = False,
    exclude: OutputFacts | None = None,
) -> OutputFacts | None:
    """An output named like `words` with one axis less than the boxes (or, `per_class`, as
    many: a score per class)."""
    for output in facts.outputs:
        if output is exclude or not named_like(output, *words) or named_like(output, "box"):
            continue
        if len(output.shape) == rank - 1 or (per_class and len(output.shape) == rank):
            return output
    return None


def raw_layout(facts: ModelFacts) -> Found | None:
    """One rank-3 output of raw YOLO predictions, anchors last (v8) or first (v5)."""
    for output in facts.outputs:
        if len(output.shape) != 3 or not is_float(output) or output.producer != "Concat":
            continue
        reason = _raw_reason(output)
        if reason:
            return [output.name], reason
    return None


def _raw_reason(output: OutputFacts) -> str | None:
    middle, last = size(output.shape[1]), size(output.shape[2])
    if middle and last:
        anchors_last = last > middle
        anchors, values = (last, middle) if anchors_last else (middle, last)
        grids = next((GRIDS[n] for n in GRIDS if anchors % n == 0), None)
        if grids is None:
            return None
        counted = f"{anchors} anchors (grids at {grids})"
    elif (middle or last) and named_like(output, "output", "pred"):
        anchors_last, values = middle is not None, middle or last or 0
        counted = "each anchor (their number read from the run)"
    else:
        return None
    if values < (5 if anchors_last else 6):
        return None
    if anchors_last:
        return (
            f"{output.name} {shape_text(output.shape, 'N')}: cx, cy, w, h and {values - 4} "
            f"class scores for {counted}, no objectness: a YOLOv8/v11-style detector before "
            "NMS (decoded and suppressed here)"
        )
    return (
        f"{output.name} {shape_text(output.shape, 'N')}: cx, cy, w, h, objectness and "
        f"{values - 5} class scores for {counted}: a YOLOv5/YOLOX-style detector before NMS "
        "(decoded and suppressed here)"
    )


def rows_layout(facts: ModelFacts) -> Found | None:
    """One output of NMS rows of 5, 6 or 7 values (module docstring)."""
    for output in facts.outputs:
        columns = size(output.shape[-1]) if len(output.shape) in (2, 3) else None
        if columns not in ROW_COLUMNS or not is_float(output):
            continue
        named = named_like(output, "box", "det", "nms")
        unnamed_rows = len(output.shape) == 3 and columns == 6
        unnamed_rows &= output.producer not in SOFTMAX_OPS
        indexed = columns == 7 and len(output.shape) == 2 and output.producer == "Concat"
        if named or unnamed_rows or indexed:
            return [output.name], (
                f"{output.name} {shape_text(output.shape, 'NK' if len(output.shape) == 3 else 'K')}"
                f" read as rows of {ROW_COLUMNS[columns]}: an object detector after NMS"
            )
    return None


def heads_layout(facts: ModelFacts) -> Found | None:
    """Pairs of per-head class scores (after a Sigmoid) and box distributions."""
    scores = [o for o in facts.outputs if _rank3_float(o) and o.producer == "Sigmoid"]
    others = [o for o in facts.outputs if _rank3_float(o) and o.producer != "Sigmoid"]
    pairs = [pair for score in scores if (pair := _head_pair(score, others)) is not None]
    cells = [count for _, _, count in pairs]
    if len(pairs) < 2 or len(set(cells)) != len(cells):
        return None
    pairs.sort(key=lambda pair: -pair[2])
    described = ", ".join(
        f"{s.name} {shape_text(s.shape, 'N')} with {b.name} {shape_text(b.shape, 'N')}"
        for s, b, _ in pairs
    )
    return [name for s, b, _ in pairs for name in (s.name, b.name)], (
        f"{len(pairs)} heads, {described}: per-cell class scores (after Sigmoid) and box "
        "distributions (4 sides x bins) of an anchor-free detector before decoding "
        "(PicoDet-style; decoded on grids of the input's size / strides 8, 16, 32, ... and "
        "suppressed here)"
    )


def _rank3_float(output: OutputFacts) -> bool:
    return len(output.shape) == 3 and is_float(output)


def _head_pair(
    score: OutputFacts, others: list[OutputFacts]
) -> tuple[OutputFacts, OutputFacts, int] | None:
    """(score, boxes, cells): the first of `others` sharing a fixed cell count with the
    score head whose other axis is 4 x bins (>= 8); None when none does."""
    for boxes in others:
        cells = _shared_cells(score, boxes)
        if cells is not None:
            return score, boxes, cells
    return None


def _shared_cells(score: OutputFacts, boxes: OutputFacts) -> int | None:
    for cells in (size(dim) for dim in score.shape[1:]):
        rest = [size(dim) for dim in boxes.shape[1:]]
        if cells is None or cells not in rest:
            continue
        rest.remove(cells)
        if rest[0] is not None and rest[0] % 4 == 0 and rest[0] >= 8:
            return cells
    return None


def why_not_for(facts: ModelFacts, picked: list[str]) -> Callable[[OutputFacts], str | None]:
    """The check of outputs a user picked for detection: one output (rows or raw
    predictions), boxes first with scores (and classes), or pairs of head scores and boxes."""
    if len(picked) == 1:
        return _why_not_single
    first = output_named(facts, picked[0])
    if len(picked) <= 3 and (not first.shape or size(first.shape[-1]) in (4, None)):
        return _why_not_split(picked)
    if len(picked) % 2 == 0:
        return _why_not_heads
    return lambda _: (
        f"the outputs go boxes first ({BOX_SHAPES}), then scores and classes; or per head, "
        "class scores then box distributions"
    )


def _why_not_single(output: OutputFacts) -> str | None:
    if len(output.shape) not in (2, 3):
        return (
            "one output must be NMS rows ([N, K, 6], [K, 7]) or raw predictions "
            "([N, anchors, 5 + classes], [N, 4 + classes, anchors])"
        )
    return None


def _why_not_heads(output: OutputFacts) -> str | None:
    if len(output.shape) not in (2, 3):
        return "heads are pairs of class scores [N, cells, classes] and boxes [N, cells, 4 x bins]"
    return None


def _why_not_split(picked: list[str]) -> Callable[[OutputFacts], str | None]:
    """The check of separate outputs: boxes [N, K, 4] / [K, 4] first, then scores with one
    axis less (or a score per class: as many), then maybe classes."""
    ranks: dict[int, int] = {}

    def why_not(output: OutputFacts) -> str | None:
        place = picked.index(output.name)
        ranks[place] = len(output.shape)
        if place == 0:
            wrong = ranks[0] not in (2, 3) or size(output.shape[-1]) not in (4, None)
        else:
            wrong = 0 in ranks and ranks[place] not in (ranks[0] - 1, ranks[0])
        if wrong:
            return f"the outputs go boxes first ({BOX_SHAPES}), then scores and classes"
        return None

    return why_not
