"""How far one model's numbers are from another's: output accuracy against the original,
backend cross-checks, activation-range calibration for INT8, per-layer quantization error.

A new accuracy metric, a new calibration method: here.
"""
