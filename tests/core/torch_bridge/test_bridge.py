"""The ONNX-to-PyTorch bridge: same outputs as ONNX Runtime, trainable layers, refusals."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from optistudio.core.torch_bridge import UnsupportedOps, supported_ops, to_torch, unsupported_ops
from tests.core.torch_bridge.bridge_models import tiny_cnn, tiny_mlp, with_ops

torch = pytest.importorskip("torch", reason="needs the qat extra: pip install 'optistudio[qat]'")
pytestmark = pytest.mark.extras


def _ort(model: onnx.ModelProto, *inputs: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, inputs, strict=True)))


def _torch(module, *inputs: np.ndarray) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    with torch.no_grad():
        return [y.numpy() for y in module(*(torch.from_numpy(x) for x in inputs))]


@pytest.mark.parametrize(
    ("build", "shape"),
    [(tiny_cnn, (5, 1, 8, 8)), (lambda: tiny_cnn(opset=17), (2, 1, 8, 8)), (tiny_mlp, (7, 12))],
    ids=["cnn", "cnn-opset17", "mlp"],
)
def test_outputs_match_onnxruntime(build, shape) -> None:  # type: ignore[no-untyped-def]
    model = build()
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)

    expected, got = _ort(model, x), _torch(to_torch(model), x)

    assert len(got) == len(expected)
    for want, have in zip(expected, got, strict=True):
        assert have.shape == want.shape
        np.testing.assert_allclose(have, want, atol=1e-5, rtol=1e-4)


def test_layers_are_torch_layers_with_trainable_weights() -> None:
    module = to_torch(tiny_cnn())

    convs = [m for m in module.modules() if isinstance(m, torch.nn.Conv2d)]
    linears = [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
    (y,) = module(torch.randn(2, 1, 8, 8))
    y.sum().backward()

    assert [c.groups for c in convs] == [1, 8, 1]
    assert len(linears) == 1
    assert all(p.requires_grad and p.grad is not None for p in module.parameters())


def test_onnx_weights_write_back_name_for_name() -> None:
    model = tiny_cnn()
    module = to_torch(model)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.mul_(1.1)
    x = np.random.default_rng(4).standard_normal((3, 1, 8, 8)).astype(np.float32)

    weights = module.onnx_weights()
    for init in model.graph.initializer:
        if init.name in weights:
            init.CopyFrom(
                onnx.numpy_helper.from_array(weights[init.name].astype(np.float32), init.name)
            )

    assert {"w1", "b1", "wd", "wp", "bp", "wf", "bf", "g", "beta"} <= weights.keys()
    np.testing.assert_allclose(_ort(model, x)[0], _torch(module, x)[0], atol=1e-5, rtol=1e-4)


def test_unsupported_ops_are_named_before_building(monkeypatch: pytest.MonkeyPatch) -> None:
    from optistudio.core.torch_bridge import convert

    model = with_ops("Relu", "NonMaxSuppression", "LSTM", "LSTM")
    monkeypatch.setattr(convert, "BUILDERS", {})  # building anything would fail with KeyError

    with pytest.raises(UnsupportedOps) as caught:
        to_torch(model)

    assert caught.value.ops == ["LSTM", "NonMaxSuppression"]
    assert "LSTM, NonMaxSuppression" in caught.value.message
    assert "int8_static" in caught.value.message


def test_supported_ops_cover_small_classifiers() -> None:
    needed = {"Conv", "BatchNormalization", "Relu", "Clip", "HardSwish", "Gemm", "MatMul",
              "Flatten", "Reshape", "GlobalAveragePool", "MaxPool", "Softmax", "Pad"}  # fmt: skip

    assert needed <= supported_ops()
    assert unsupported_ops(tiny_cnn()) == []
