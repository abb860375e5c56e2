"""Strict JSON text: no NaN or Infinity, which are not JSON."""

from __future__ import annotations

import json
import math

from specfleet.jsontext import dumps, finite


def test_non_finite_floats_are_null_at_any_depth():
    value = {"a": math.inf, "b": [1.5, -math.inf, (math.nan, 2)], "c": "inf", "d": None}
    assert finite(value) == {"a": None, "b": [1.5, None, [None, 2]], "c": "inf", "d": None}
    text = dumps(value, indent=1)
    assert json.loads(text, parse_constant=lambda name: 1 / 0) == finite(value)
    assert dumps([0.1, 2]) == json.dumps([0.1, 2])  # finite numbers exactly as json writes them
