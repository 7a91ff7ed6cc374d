"""Argument parsing helpers shared by the `optistudio` subcommands."""

from __future__ import annotations

import argparse
from typing import Any

from optistudio.core.errors import InvalidSpec


def parse_int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def parse_core_list(text: str) -> list[int]:
    try:
        cores = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected core numbers like 0,1 got {text!r}") from None
    if not cores or min(cores) < 0:
        raise argparse.ArgumentTypeError(f"expected core numbers like 0,1 got {text!r}")
    return cores


def parse_assignment(text: str) -> tuple[str, list[int]]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=D1,D2,..., got {text!r}")
    return name, parse_int_list(value)


def parse_float_list(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected numbers like 0.5,0.5,0.5 got {text!r}"
        ) from None


def validated(spec_class: Any, fields: dict[str, Any], what: str) -> Any:
    from pydantic import ValidationError

    from optistudio.core.errors import describe_validation_error

    try:
        return spec_class(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        raise InvalidSpec(f"Invalid {what} options: {describe_validation_error(exc)}") from None
