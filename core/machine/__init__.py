"""The machine a measurement ran on: its environment fingerprint (CPU model, ISA flags,
library versions), CPU affinity, contention from other processes, and its GPUs.

A new fact recorded with every measurement, a new CPU-dependent default: here.
"""
