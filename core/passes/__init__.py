"""Optimization passes: each turns one ONNX model into another; see `optistudio.core.passes.base`."""
