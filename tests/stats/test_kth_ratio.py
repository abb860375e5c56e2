"""`interval.kth_ratio`: the k-th smallest ratio of a cell without sorting all m x n of them
(a year of repeats pooled in one cell is 2.25 M ratios), exactly the sorted list's k-th."""

from __future__ import annotations

import random

from specfleet.stats.interval import kth_ratio


def test_every_rank_of_random_cells_is_the_sorted_lists() -> None:
    draw = random.Random(3)
    for _ in range(300):
        m, n = draw.randint(1, 9), draw.randint(1, 9)
        # Ties and extreme magnitudes beside ordinary rates.
        pool = [draw.choice([1.0, 2.0, 3.0, 0.1, 7.7, 1e-300, 1e300]) if draw.random() < 0.3
                else draw.uniform(0.01, 500) for _ in range(m + n)]
        base, other = pool[:m], pool[m:]
        ratios = sorted(o / b for o in other for b in base)
        assert [kth_ratio(base, other, k) for k in range(1, m * n + 1)] == ratios, (base, other)


def test_a_year_pooled_in_one_cell_gives_the_sorted_lists_bounds() -> None:
    draw = random.Random(5)
    base = [100 * (1 + draw.uniform(-0.02, 0.02)) for _ in range(400)]
    other = [150 * (1 + draw.uniform(-0.02, 0.02)) for _ in range(400)]
    ratios = sorted(o / b for o in other for b in base)
    k = 70_000
    assert (kth_ratio(base, other, k), kth_ratio(base, other, 400 * 400 - k + 1)) == (
        ratios[k - 1], ratios[-k])
