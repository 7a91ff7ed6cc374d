"""Timing a model: the benchmark engine and its stability rule, interleaved A/B comparison with
a bootstrap interval, latency statistics, stage timing and the memory soak.

A new way to time a model, a new latency statistic: here.
"""
