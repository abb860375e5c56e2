"""Rollbacks at a sliding window's edge, every start position, both engines.

The tiny models' windows (and llama4's attention chunk) are 8 tokens. A verify block may
start with the cache below the window, end past it, be wider than it, and be followed at
once by a second block that is rolled back too. For each cache length 4..11 before the
block (so the window fills, is exactly full, and has wrapped), blocks of width 2, 8, 9 and
17 keep one token or all but one, a second block of width 9 keeps 3, and two one-token steps
follow: every row of every kept token equals plain decoding's row at that position.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specfleet.engine.runners.toy import lcg_tokens

VOCAB = 96
STARTS = range(4, 12)  # cache length before the first block: under, at and past the window
WIDTHS = (2, 8, 9, 17)
SECOND = (9, 3)  # width, kept
SEQUENCE = lcg_tokens(21, max(STARTS) + max(WIDTHS) + SECOND[0] + 3, VOCAB)


def _plain_rows(runner) -> list[np.ndarray]:
    """rows[p]: the logits predicting SEQUENCE[p + 1], one token at a time."""
    runner.reset()
    rows = [runner.read_row(runner.prefill(SEQUENCE[:1]), 0)]
    rows += [runner.read_row(runner.forward([t]), 0) for t in SEQUENCE[1:-1]]
    return rows


def _block(runner, at: int, width: int, kept: int, rows, atol: float, case: str) -> int:
    """Forward SEQUENCE[at:at+kept] then wrong tokens, check the kept rows, roll back."""
    wrong = [(SEQUENCE[at + kept + i] + 1 + i) % VOCAB for i in range(width - kept)]
    logits = runner.forward([*SEQUENCE[at : at + kept], *wrong])
    for i in range(kept):
        np.testing.assert_allclose(runner.read_row(logits, i), rows[at + i], rtol=0, atol=atol,
                                   err_msg=f"{case}: row {at + i}")
    runner.rollback(width - kept)
    assert runner.cache_len() == at + kept, case
    return at + kept


def _sweep(runner, name: str, atol: float) -> None:
    rows = _plain_rows(runner)
    for start in STARTS:
        for width in WIDTHS:
            for kept in sorted({1, width - 1}):
                case = f"{name} start={start} width={width} kept={kept}"
                runner.reset()
                runner.prefill(SEQUENCE[:start])
                at = _block(runner, start, width, kept, rows, atol, case)
                at = _block(runner, at, *SECOND, rows, atol, case + " then 9/3")
                for _ in range(2):
                    row = runner.read_row(runner.forward([SEQUENCE[at]]), 0)
                    np.testing.assert_allclose(row, rows[at], rtol=0, atol=atol,
                                               err_msg=f"{case}: step at {at}")
                    at += 1


@pytest.mark.parametrize("name", ["gemma3_text", "ministral3"])
def test_torch_rollbacks_around_the_window_edge_keep_plain_rows(name):
    from specfleet.engine.runners.tiny_torch import TINY_SLIDING_WINDOW, tiny_runner

    assert TINY_SLIDING_WINDOW == 8 and max(STARTS) > TINY_SLIDING_WINDOW
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _sweep(tiny_runner(name), name, atol=1e-9)  # float64
    finally:
        torch.set_num_threads(threads)


@pytest.mark.mlx
@pytest.mark.parametrize("name", ["gemma3_text", "ministral3", "llama4"])
def test_mlx_rollbacks_around_the_window_edge_keep_plain_rows(name):
    pytest.importorskip("mlx.core", reason="the mlx engine is not installed")
    from specfleet.engine.runners.tiny_mlx import WINDOW, tiny_runner

    assert WINDOW == 8 and max(STARTS) > WINDOW
    _sweep(tiny_runner(name), name, atol=1e-3)  # float32: rounding only (~1e-5)
