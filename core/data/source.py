"""What calibration, accuracy checks and diagnostics read input data from.

Any object with `batches()` and `description` will do: the datasets in
`optistudio.core.data.datasets` and `optistudio.core.data.images` are the built-in ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import numpy as np


class CalibrationSource(Protocol):
    """Streams input batches (dict of input name -> array); iterating again starts over."""

    def batches(self) -> Iterator[dict[str, np.ndarray]]: ...

    @property
    def description(self) -> str: ...
