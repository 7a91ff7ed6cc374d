"""The bridge builds the mask ops real exported models use around their attention and padding
(Equal, Where, comparisons, Not/And/Or, Expand) and ConstantOfShape, with a fixed shape or one
the graph computes: same outputs as ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import parser

from optistudio.core.torch_bridge import to_torch, unsupported_ops

torch = pytest.importorskip("torch", reason="needs the qat extra: pip install 'optistudio[qat]'")
pytestmark = pytest.mark.extras

MASKED_FILL = """
<ir_version: 8, opset_import: ["" : 17]>
masked (float[N, 6] x, float[N, 6] m) => (float[N, 6] y) {
    zero = Constant <value = float {0.0}> ()
    big = Constant <value = float {-100.0}> ()
    pad = Equal (m, zero)
    y = Where (pad, big, x)
}
"""
COMPUTED_SHAPE = """
<ir_version: 8, opset_import: ["" : 17]>
ones_like (float[N, 5] x) => (float[N, 5] y, bool[N, 5] keep) {
    s = Shape (x)
    one = ConstantOfShape <value = float[1] {1.0}> (s)
    y = Add (x, one)
    low = Less (x, one)
    high = Greater (x, one)
    either = Or (low, high)
    near = LessOrEqual (x, y)
    both = And (either, near)
    keep = Not (both)
}
"""
FIXED_SHAPE = """
<ir_version: 8, opset_import: ["" : 17]>
fixed (float[N, 4] x) => (float[N, 4] y, int64[2, 4] z) {
    shape = Constant <value = int64[2] {2, 4}> ()
    z = ConstantOfShape <value = int64[1] {7}> (shape)
    row = Constant <value = int64[2] {1, 4}> ()
    ones = ConstantOfShape <value = float[1] {2.0}> (row)
    target = Shape (x)
    wide = Expand (ones, target)
    y = Mul (x, wide)
}
"""


def run_both(text: str, *inputs: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    model = parser.parse_model(text)
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    expected = session.run(None, dict(zip(names, inputs, strict=True)))
    with torch.no_grad():
        got = [t.numpy() for t in to_torch(model)(*(torch.from_numpy(x) for x in inputs))]
    return expected, got


@pytest.mark.parametrize(
    ("text", "shapes"),
    [(MASKED_FILL, [(3, 6), (3, 6)]), (COMPUTED_SHAPE, [(4, 5)]), (FIXED_SHAPE, [(3, 4)])],
    ids=["equal-where", "computed-shape-comparisons", "fixed-shape-expand"],
)
def test_mask_ops_and_constant_of_shape_match_onnxruntime(
    text: str, shapes: list[tuple[int, ...]]
) -> None:
    rng = np.random.default_rng(0)
    inputs = [rng.integers(-1, 3, size=shape).astype(np.float32) for shape in shapes]

    expected, got = run_both(text, *inputs)

    assert len(got) == len(expected)
    for want, have in zip(expected, got, strict=True):
        assert have.dtype == want.dtype and have.shape == want.shape
        np.testing.assert_array_equal(have, want)


def test_the_mask_ops_are_no_longer_refused() -> None:
    assert unsupported_ops(parser.parse_model(MASKED_FILL)) == []
    assert unsupported_ops(parser.parse_model(COMPUTED_SHAPE)) == []
