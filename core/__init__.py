"""Optistudio's engine (`optistudio.core`): a plain library usable from a notebook.

It never imports streamlit, celery, sqlalchemy or the app's rooms (db, workers, studio).
Capabilities, each a package, lowest floor first (a package imports only lower floors):

    errors, registry, progress, loader, metrics   leaves used everywhere
    model/      intake and what a model declares
    data/       inputs, user data, calibration sources
    machine/    environment fingerprint, affinity, contention, GPUs
    backends/   inference backends behind one interface, and the machine's inventory
    numerics/   accuracy, cross-checks, calibration, per-layer error
    measure/    benchmark, A/B comparison, statistics, stages, soak
    fusion/     registered rewrite patterns
    passes/     registered optimization passes
    optimize/   recipes, Auto, the optimization run
    batching/   the serving pipeline, its simulator, load generator and tuner
    diagnose/   profiles and explanations
    report/     snapshots, figures, HTML report, deployable bundle

docs/ARCHITECTURE.md says where each kind of change goes.
"""
