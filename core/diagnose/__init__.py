"""Why a model is as fast as it is: per-operator profiles, profile comparison, the "why is INT8
not faster" explainer, per-layer quantization error as a report, and the diagnostics run.

A new diagnostic rule or profiler: here.
"""
