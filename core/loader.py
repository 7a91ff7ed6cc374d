"""Objects named by "module:attribute" references, as registry entries name their code.

Specs in the registries (backends, passes, fusion patterns) name the code behind them by
reference, so listing them never imports the heavy module; `load` imports it when used.
"""

from __future__ import annotations

import importlib
from typing import Any


def load(reference: str) -> Any:
    """The object `reference` ("package.module:attribute") names, importing its module."""
    module_name, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module_name), attribute)
