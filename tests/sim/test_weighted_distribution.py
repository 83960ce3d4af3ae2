"""ITL statistics from (value, count) runs equal those of the expanded sample."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.metrics.summary import distribution, weighted_distribution

samples = st.lists(st.tuples(st.floats(0.0, 10.0, allow_nan=False), st.integers(0, 6)),
                   min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(pairs=samples)
def test_weighted_percentiles_equal_numpy_on_the_expanded_sample(pairs):
    values = np.array([v for v, _ in pairs])
    counts = np.array([c for _, c in pairs], dtype=np.int64)
    expected = distribution(np.repeat(values, counts))
    got = weighted_distribution(values, counts)
    if expected["mean"] is None:
        assert got == expected
        return
    for key in ("p50", "p90", "p99", "p999"):
        assert got[key] == expected[key], key  # exact, not approximately
    assert np.isclose(got["mean"], expected["mean"], rtol=1e-12, atol=0.0)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.floats(0.0, 1e6, allow_nan=False), min_size=1, max_size=300),
       nans=st.integers(0, 3))
def test_distribution_takes_each_percentile_exactly_as_numpy_alone(values, nans):
    """The percentiles come from one `np.percentile` call over all of them: bit for bit what
    one call per percentile gives."""
    from batchsim.metrics.summary import PERCENTILES

    sample = np.array(values + [np.nan] * nans)
    got = distribution(sample)
    kept = sample[~np.isnan(sample)]
    for key, q in PERCENTILES.items():
        assert got[key] == float(np.percentile(kept, q)), key
    assert got["mean"] == float(kept.mean())
