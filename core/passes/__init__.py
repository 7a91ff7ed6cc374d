"""Optimization passes: each turns one ONNX model into another; see `core.passes.base`."""
