"""Evaluators: a variant judged in its task's own terms (strings read, boxes found, top-1).

`base.py` is the contract and the registry (entry-point group `optistudio.evaluators`); one
module per task (classification, ctc_text, detection_boxes, detection_map, segmentation,
embedding, regression); `recognize.py` reads a model's outputs and decides the task from each
task's weighed evidence (`evidence.py`: metadata alone never decides), with its confidence and
reasons, or says why none. Shared pieces: `outputs.py` (reading an output's facts),
`softmax_chain.py` (a softmax written as Exp / ReduceSum / Div), `input_kinds.py` (an image, token
ids, audio), `label_metadata.py` (class names in the metadata), `tallying.py` (the bounded
worst samples, labels by sample), `boxes.py` (IoU, matching, NMS, AP@0.5), `box_recognition.py`
(which outputs are a detector's), `ctc_recognition.py` (whether a model is a text recognizer),
`box_layouts.py` (a detector's arrays read as boxes, in the layout a run returns),
`components.py` (connected regions of a mask).
"""
