"""The end-of-run statistics' shortcuts give the numbers of the plain numpy calls they replace,
bit for bit: the stable order of the gaps. (The time series' per-bin sums and maxima, binned as
the run goes, are checked in test_timeseries_exact.py.)"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.metrics.summary import stable_order

# Repeated values, both zeros, infinities and NaN: the cases where orders could differ.
_special = st.sampled_from([0.0, -0.0, 0.5, 1.0, 3.0, 1e-300, 5e-324, np.inf, -np.inf, np.nan,
                            -1.5])
_floats = st.one_of(_special, st.floats(allow_nan=True, allow_infinity=True))


@settings(max_examples=300, deadline=None)
@given(values=st.lists(_floats, max_size=60))
def test_stable_order_is_numpys_stable_argsort(values):
    array = np.array(values, dtype=np.float64)
    assert stable_order(array).tolist() == np.argsort(array, kind="stable").tolist()


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.floats(min_value=0.0, max_value=1e6), max_size=60))
def test_stable_order_of_gaps_keeps_ties_in_index_order(values):
    array = np.array(values + values[::-1], dtype=np.float64)  # every value at least twice
    assert stable_order(array).tolist() == np.argsort(array, kind="stable").tolist()
