"""The timeline plot joins a row's bars closer than a pixel (heterosim/results/plots.py, _merge_bars)."""
from __future__ import annotations

import numpy as np

from heterosim.results.plots import _merge_bars


def test_bars_closer_than_the_gap_are_joined_and_the_others_kept():
    # unsorted; [5, 6) holds [5.2, 5.5) inside it; [0, 1) and [1.5, 2) are 0.5 apart, [2, ...) to [5, ...) 3 apart
    start = np.array([5.0, 0.0, 1.5, 5.2, 9.0])
    end = np.array([6.0, 1.0, 2.0, 5.5, 9.5])
    s, e = _merge_bars(start, end, gap=1.0)
    assert s.tolist() == [0.0, 5.0, 9.0]
    assert e.tolist() == [2.0, 6.0, 9.5]


def test_a_bar_inside_a_long_one_does_not_end_it_early():
    # [0, 10) covers [1, 2); [10.5, 11) starts 0.5 after the long bar's end, not 8.5 after the short one's
    s, e = _merge_bars(np.array([0.0, 1.0, 10.5]), np.array([10.0, 2.0, 11.0]), gap=1.0)
    assert s.tolist() == [0.0] and e.tolist() == [11.0]


def test_a_gap_of_exactly_the_threshold_stays_a_gap():
    s, e = _merge_bars(np.array([0.0, 2.0]), np.array([1.0, 3.0]), gap=1.0)
    assert s.tolist() == [0.0, 2.0] and e.tolist() == [1.0, 3.0]
