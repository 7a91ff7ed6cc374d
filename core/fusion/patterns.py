"""The built-in fusion rules, one factory per pattern, each a pattern / check / rewrite triple.

The math:

- conv_bn: BatchNormalization(y) = s * (y - mean) + beta with s = gamma / sqrt(var + eps) per
  channel, and a Conv is linear in its weight and bias, so Conv(x, W', b') with
  W' = W * s (scaled along output channels, axis 0) and b' = (b - mean) * s + beta is the same
  function. Folding is done in float64 and stored in the weight's dtype.
- conv_relu, conv_clip: FusedConv(x) = act(Conv(x)) with act = max(y, 0) or min(max(y, lo), hi),
  applied to each output element as it is written.
- matmul_add_gemm: for a 2-D A, MatMul(A, B) + c = Gemm(A, B, c) (alpha = beta = 1, c broadcast
  along rows).
- transpose_transpose: output axis j of Transpose(perm2)(Transpose(perm1)(x)) is input axis
  perm1[perm2[j]]; the composed perm replaces the pair, or nothing does when it is the identity.
- reshape_reshape: Reshape keeps the row-major element order, so Reshape(Reshape(x, s1), s2) =
  Reshape(x, s2) when s2 never refers to the intermediate's dims (a 0 with allowzero=0 does);
  a -1 is fine because the element count is the same.

Rewriter facts these rules lean on (onnxscript 0.7): a check that fails returns a falsy
MatchResult whose reason the tracer reports; a matched node whose output has consumers outside
the pattern is refused by the matcher before the check runs; the value a rewrite returns takes
the name of the value it replaces (so returning a graph input unchanged would rename it); a new
initializer whose name exists replaces the old one (so folded weights get fresh names).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult, RewriteRule

_FLOAT32_MAX = float(np.finfo(np.float32).max)
_FLOAT_TYPES = (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
_MICROSOFT = "com.microsoft"


def conv_bn() -> RewriteRule:
    """Conv (+ optional bias) → BatchNormalization ⇒ Conv with folded weight and bias."""
    return RewriteRule(_conv_bn_pattern, _conv_bn_rewrite, _conv_bn_check, name="conv_bn")


def conv_relu() -> RewriteRule:
    """Conv → Relu ⇒ com.microsoft FusedConv(activation="Relu")."""
    return RewriteRule(_conv_relu_pattern, _conv_relu_rewrite, _fused_conv_check, name="conv_relu")


def conv_clip() -> RewriteRule:
    """Conv → Clip(constant min, max) ⇒ FusedConv(activation="Clip", activation_params)."""
    return RewriteRule(_conv_clip_pattern, _conv_clip_rewrite, _conv_clip_check, name="conv_clip")


def matmul_add_gemm() -> list[RewriteRule]:
    """MatMul(2-D A, constant B) → Add(constant bias) ⇒ Gemm, with the Add's inputs either way."""
    rule = RewriteRule(
        _matmul_add_pattern, _gemm_rewrite, _matmul_add_check, name="matmul_add_gemm"
    )
    return list(rule.commute())


def transpose_transpose() -> RewriteRule:
    """Transpose → Transpose ⇒ one Transpose, or none when the composition is the identity."""
    return RewriteRule(
        _transposes_pattern, _transposes_rewrite, _transposes_check, name="transpose_transpose"
    )


def reshape_reshape() -> RewriteRule:
    """Reshape → Reshape(constant shape without 0) ⇒ one Reshape."""
    return RewriteRule(
        _reshapes_pattern, _reshapes_rewrite, _reshapes_check, name="reshape_reshape"
    )


# conv_bn


def _conv_bn_pattern(op: Any, x: Any, scale: Any, bias: Any, mean: Any, var: Any) -> Any:
    conv = op.Conv(x, _allow_other_inputs=True, _outputs=["conv_out"])
    return op.BatchNormalization(conv, scale, bias, mean, var, _outputs=["bn_out"])


def _conv_bn_check(context: Any, conv_out: ir.Value, bn_out: ir.Value, **_: Any) -> MatchResult:
    result = MatchResult()
    conv, norm = _producer(conv_out), _producer(bn_out)
    if norm.attributes.get_int("training_mode", 0):
        return result.fail("BatchNormalization in training mode")
    if _constant(conv.inputs[1]) is None:
        return result.fail("Conv weight is not a constant")
    if _conv_bias(conv) is not None and _constant(_conv_bias(conv)) is None:
        return result.fail("Conv has a bias that is not a constant")
    for role, value in zip(("scale", "B", "mean", "var"), norm.inputs[1:5], strict=True):
        if _constant(value) is None:
            return result.fail(f"BatchNormalization {role} is not a constant")
    return result


def _conv_bn_rewrite(op: Any, x: ir.Value, conv_out: ir.Value, bn_out: ir.Value, **_: Any) -> Any:
    conv, norm = _producer(conv_out), _producer(bn_out)
    scale, shift, mean, var = (_checked(value).astype(np.float64) for value in norm.inputs[1:5])
    factor = scale / np.sqrt(var + norm.attributes.get_float("epsilon", 1e-5))
    weight, bias_value = _checked(conv.inputs[1]), _conv_bias(conv)
    bias = np.zeros_like(mean) if bias_value is None else _checked(bias_value)
    folded_weight = weight * factor.reshape(-1, *[1] * (weight.ndim - 1))
    folded_bias = (bias - mean) * factor + shift
    return op.Conv(
        x,
        _new_initializer(op, conv, folded_weight.astype(weight.dtype), "bn_folded_weight"),
        _new_initializer(op, conv, folded_bias.astype(weight.dtype), "bn_folded_bias"),
        **conv.attributes,
    )


def _conv_bias(conv: ir.Node) -> ir.Value | None:
    return conv.inputs[2] if len(conv.inputs) > 2 else None


# conv_relu, conv_clip


def _conv_relu_pattern(op: Any, x: Any) -> Any:
    return op.Relu(op.Conv(x, _allow_other_inputs=True, _outputs=["conv_out"]))


def _conv_clip_pattern(op: Any, x: Any) -> Any:
    conv = op.Conv(x, _allow_other_inputs=True, _outputs=["conv_out"])
    return op.Clip(conv, _allow_other_inputs=True, _outputs=["clip_out"])


def _fused_conv_check(context: Any, conv_out: ir.Value, **_: Any) -> MatchResult:
    result = MatchResult()
    weight = _producer(conv_out).inputs[1]
    dtype = weight.dtype if weight is not None else None
    if dtype != ir.DataType.FLOAT:
        return result.fail(f"FusedConv has a float32 kernel only; this Conv is {_dtype(dtype)}")
    return result


def _conv_clip_check(context: Any, conv_out: ir.Value, clip_out: ir.Value, **_: Any) -> MatchResult:
    result = _fused_conv_check(context, conv_out)
    if not result:
        return result
    clip = _producer(clip_out)
    for index, bound in ((1, "min"), (2, "max")):
        if _clip_bound(clip, index, 0.0) is None:
            return result.fail(f"Clip {bound} is not a constant scalar")
    return result


def _conv_relu_rewrite(op: Any, x: ir.Value, conv_out: ir.Value) -> Any:
    return _fused_conv(op, _producer(conv_out), activation="Relu")


def _conv_clip_rewrite(op: Any, x: ir.Value, conv_out: ir.Value, clip_out: ir.Value) -> Any:
    clip = _producer(clip_out)
    bounds = [_clip_bound(clip, 1, -_FLOAT32_MAX), _clip_bound(clip, 2, _FLOAT32_MAX)]
    return _fused_conv(op, _producer(conv_out), activation="Clip", activation_params=bounds)


def _fused_conv(op: Any, conv: ir.Node, **activation: Any) -> Any:
    return op.FusedConv(*conv.inputs, _domain=_MICROSOFT, **conv.attributes, **activation)


def _clip_bound(clip: ir.Node, index: int, default: float) -> float | None:
    """Clip's min (index 1) or max (2): an input since opset 11, an attribute before; None when
    it is not a constant scalar. A missing bound is `default` (no clamping on that side)."""
    if len(clip.inputs) > index and clip.inputs[index] is not None:
        data = _constant(clip.inputs[index])
        return float(data.item()) if data is not None and data.size == 1 else None
    return clip.attributes.get_float("min" if index == 1 else "max", default)


# matmul_add_gemm


def _matmul_add_pattern(op: Any, a: Any, b: Any, bias: Any) -> Any:
    return op.Add(op.MatMul(a, b, _outputs=["product"]), bias)


def _matmul_add_check(
    context: Any, a: ir.Value, b: ir.Value, bias: ir.Value, product: ir.Value
) -> MatchResult:
    result = MatchResult()
    if a.shape is None or len(a.shape) != 2:
        rank = "of unknown rank" if a.shape is None else f"{len(a.shape)}-D"
        return result.fail(f"MatMul input A is {rank}; Gemm takes a 2-D A (no batching)")
    if a.dtype not in _FLOAT_TYPES:
        return result.fail(f"MatMul is {_dtype(a.dtype)}; Gemm kernels are for floats")
    matrix, vector = _constant(b), _constant(bias)
    if matrix is None or matrix.ndim != 2:
        return result.fail("MatMul input B is not a constant 2-D matrix")
    if vector is None or vector.ndim > 1 or vector.size not in (1, matrix.shape[1]):
        return result.fail(
            f"Add's other input is not a constant bias of shape [{matrix.shape[1]}] or [1]"
        )
    return result


def _gemm_rewrite(op: Any, a: ir.Value, b: ir.Value, bias: ir.Value, product: ir.Value) -> Any:
    return op.Gemm(a, b, bias)


# transpose_transpose


def _transposes_pattern(op: Any, x: Any) -> Any:
    return op.Transpose(op.Transpose(x, _outputs=["first"]), _outputs=["second"])


def _transposes_check(context: Any, x: ir.Value, first: ir.Value, second: ir.Value) -> MatchResult:
    result = MatchResult()
    if _composed_perm(x, first, second) is None:
        return result.fail("a Transpose has no perm and the input rank is unknown")
    return result


def _transposes_rewrite(op: Any, x: ir.Value, first: ir.Value, second: ir.Value) -> Any:
    perm = _composed_perm(x, first, second)
    assert perm is not None  # the check refused otherwise
    if perm != list(range(len(perm))):
        return op.Transpose(x, perm=perm)
    if x.is_graph_input() or x.is_graph_output() or x.is_initializer() or second.is_graph_output():
        return op.Identity(x)  # returning x would rename a graph input, output or initializer
    return x


def _composed_perm(x: ir.Value, first: ir.Value, second: ir.Value) -> list[int] | None:
    rank = len(x.shape) if x.shape is not None else None
    perm1, perm2 = _perm(_producer(first), rank), _perm(_producer(second), rank)
    if perm1 is None or perm2 is None:
        return None
    return [perm1[axis] for axis in perm2]


def _perm(transpose: ir.Node, rank: int | None) -> list[int] | None:
    perm = transpose.attributes.get_ints("perm", None)
    if perm is not None:
        return list(perm)
    return list(reversed(range(rank))) if rank is not None else None


# reshape_reshape


def _reshapes_pattern(op: Any, x: Any, first_shape: Any, shape: Any) -> Any:
    return op.Reshape(op.Reshape(x, first_shape), shape, _outputs=["reshaped"])


def _reshapes_check(context: Any, shape: ir.Value, reshaped: ir.Value, **_: Any) -> MatchResult:
    result = MatchResult()
    target = _constant(shape)
    if target is None:
        return result.fail("the second Reshape's shape is not a constant")
    if not _producer(reshaped).attributes.get_int("allowzero", 0) and 0 in target:
        return result.fail("the second shape has a 0, which copies a dim of the first Reshape")
    return result


def _reshapes_rewrite(op: Any, x: ir.Value, shape: ir.Value, reshaped: ir.Value, **_: Any) -> Any:
    return op.Reshape(x, shape, **_producer(reshaped).attributes)


# helpers


def _producer(value: ir.Value) -> ir.Node:
    node = value.producer()
    assert node is not None, f"pattern value {value.name} has no producer"
    return node


def _constant(value: ir.Value | None) -> np.ndarray | None:
    """The data of a true constant (an initializer that is not also a graph input, or a
    Constant node's output); None otherwise."""
    if value is None or value.is_graph_input():
        return None
    tensor = ir.convenience.get_const_tensor(value)
    return None if tensor is None else tensor.numpy()


def _checked(value: ir.Value | None) -> np.ndarray:
    """The data of a value the check already found constant."""
    data = _constant(value)
    assert data is not None, "the check accepted a value that is not a constant"
    return data


def _new_initializer(op: Any, node: ir.Node, data: np.ndarray, suffix: str) -> ir.Value:
    """An initializer named after `node` that replaces nothing already in the graph."""
    taken = node.graph.initializers if node.graph is not None else {}
    base = f"{node.name or node.op_type}_{suffix}"
    name, index = base, 1
    while name in taken:
        name, index = f"{base}_{index}", index + 1
    return op.initializer(ir.tensor(data), name=name)  # type: ignore[no-any-return]


def _dtype(dtype: ir.DataType | None) -> str:
    return "of unknown type" if dtype is None else dtype.name.lower()
