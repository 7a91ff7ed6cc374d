"""Evaluators: a variant judged in its task's own terms (strings read, boxes found, top-1).

`base.py` is the contract and the registry (entry-point group `optistudio.evaluators`); one
module per task (classification, ctc_text, detection_boxes, detection_map, segmentation,
embedding, regression); `recognize.py` reads a model's outputs and picks the task, with its
reason. Shared pieces: `outputs.py` (reading an output's facts), `tallying.py` (the bounded
worst samples, labels by sample), `boxes.py` (IoU, matching, AP@0.5), `components.py`
(connected regions of a mask).
"""
