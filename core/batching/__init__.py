"""Serving pipeline with dynamic batching, its simulator, load generator and tuner."""
