"""Video analytics: N decoded streams, frames batched across streams, results per stream."""
