"""The flat ITL log gives the same gaps as listing every (request, gap) pair."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.recorder import ITLLog

_gaps = st.lists(st.floats(0.001, 1.0), min_size=1, max_size=6)
_ids = st.lists(st.integers(0, 9), min_size=1, max_size=5, unique=True)


@settings(max_examples=200, deadline=None)
@given(runs=st.lists(st.tuples(_ids, _gaps), max_size=6),
       singles=st.lists(st.tuples(st.integers(0, 9), st.floats(0.001, 1.0)), max_size=8),
       counted=st.lists(st.booleans(), min_size=10, max_size=10))
def test_values_and_weights_expand_to_every_counted_gap(runs, singles, counted):
    log = ITLLog()
    expected: list[float] = []
    mask = np.array(counted)
    for ids, gaps in runs:
        log.add_run(np.array(ids), np.array(gaps))
        expected += [g for i in ids for g in gaps if counted[i]]
    for request_id, gap in singles:
        log.add_singles(np.array([request_id]), np.array([gap]))
        expected += [gap] if counted[request_id] else []
    values, weights = log.values_and_weights(mask)
    assert sorted(np.repeat(values, weights).tolist()) == sorted(expected)
    assert log.count() == sum(len(i) * len(g) for i, g in runs) + len(singles)
