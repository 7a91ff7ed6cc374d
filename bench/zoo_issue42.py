"""Issue 42's zoo sweep: its twelve wheel models through every stage at the CI budgets.

As `bench/zoo.py --quick --only ...`, with each model's `full_only` emptied, so that no stage is
left to the full sweep (the table in docs/BENCHMARKS.md's issue 42 section counts every stage
of every model). One model at a time, in this process.

Run:  NNCF_CI=1 .venv/bin/python bench/zoo_issue42.py --json > zoo42.json
      .venv/bin/python bench/zoo.py --table zoo42.json
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import zoo  # noqa: E402
import zoo_models  # noqa: E402

ISSUE_42 = (
    "basic_pitch", "dnsmos", "dnsmos_p808", "plcmos", "aecmos", "aecmos_48k", "smart_turn",
    "centerface", "centerface_bn", "open_nsfw", "age", "gender",
)  # fmt: skip


def every_stage(torch_python: str | None = None) -> list[zoo_models.ZooModel]:
    """The zoo with no stage left to the full sweep."""
    return [dataclasses.replace(m, full_only=()) for m in zoo_models.zoo(torch_python)]


def main(argv: list[str]) -> int:
    zoo.zoo = every_stage  # run_named looks the models up here (one process: --workers 1)
    return zoo.main(["--quick", "--only", *ISSUE_42, *argv])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
