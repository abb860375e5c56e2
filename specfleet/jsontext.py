"""Strict JSON text, what every machine-readable output writes (`-o json`, `--json`, the web
view's `/api/` answers and `runs.json`): a float that is not finite (the ratio over a zero
median, a hand-edited store's `inf` tok/s) is written as null, as NaN and Infinity are not
JSON and jq, `JSON.parse` and strict parsers refuse the whole document."""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """`value` with every non-finite float, in dicts, lists and tuples too, as None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """`json.dumps` of `finite(value)`, refusing NaN outright (`kwargs` as json.dumps takes)."""
    try:  # nothing to replace, the common case: no second walk over an export of 12,000 runs
        return json.dumps(value, allow_nan=False, **kwargs)
    except ValueError:  # a float that is not finite somewhere in it
        return json.dumps(finite(value), allow_nan=False, **kwargs)
