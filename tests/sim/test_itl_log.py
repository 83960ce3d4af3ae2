"""The flat ITL log gives the same gaps as listing every (request, gap) pair."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from batchsim.sim.recorder import ITLLog

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


def _plain_values_and_weights(runs, singles, counted):
    """Singles first, then every run's gaps in order, weighted by its counted requests."""
    values = [gap for request_id, gap in singles if counted[request_id]]
    weights = [1] * len(values)
    for ids, gaps in runs:
        weight = sum(counted[i] for i in ids)
        if weight:
            values += gaps
            weights += [weight] * len(gaps)
    return values, weights


@settings(max_examples=200, deadline=None)
@given(runs=st.lists(st.tuples(st.sampled_from([(1, 2), (3,), (1, 2, 3)]), _gaps), max_size=8),
       singles=st.lists(st.tuples(st.integers(0, 9), st.floats(0.001, 1.0)), max_size=4),
       counted=st.lists(st.booleans(), min_size=10, max_size=10))
def test_a_run_of_the_same_batch_continues_the_last_one_in_order(runs, singles, counted):
    """The ids are stored once per change of batch; values and weights keep their order."""
    log = ITLLog()
    for (ids, gaps), single in zip(runs, singles + [None] * len(runs), strict=False):
        log.add_run(np.array(ids), np.array(gaps))
        if single is not None:  # singles between runs do not break a batch's run
            log.add_singles(np.array([single[0]]), np.array([single[1]]))
    changes = sum(1 for k, (ids, _) in enumerate(runs) if k == 0 or runs[k - 1][0] != ids)
    assert len(log.run_ids_end) == changes
    values, weights = log.values_and_weights(np.array(counted))
    used = singles[:len(runs)]
    assert (values.tolist(), weights.tolist()) == _plain_values_and_weights(runs, used, counted)


@settings(max_examples=100, deadline=None)
@given(entries=st.lists(st.tuples(st.booleans(), _ids, _gaps), max_size=8))
def test_lists_and_arrays_store_the_same_bytes(entries):
    """The fast path hands its ids and gaps over as lists, the tests above as arrays."""
    from_lists, from_arrays = ITLLog(), ITLLog()
    for is_run, ids, gaps in entries:
        for log, as_given in ((from_lists, list), (from_arrays, np.array)):
            add = log.add_run if is_run else log.add_singles
            add(as_given(ids), as_given(gaps if is_run else gaps[:1] * len(ids)))
    for name in ("single_request", "single_gap", "run_ids", "run_gaps", "run_ids_end",
                 "run_gaps_end"):
        assert getattr(from_lists, name) == getattr(from_arrays, name), name


@settings(max_examples=200, deadline=None)
@given(runs=st.lists(st.tuples(_ids, st.lists(st.sampled_from([0.25, 0.5, 0.125, 0.3]),
                                              min_size=1, max_size=6)), max_size=6),
       singles=st.lists(st.tuples(st.integers(0, 9), st.sampled_from([0.25, 0.5, 0.7])),
                        max_size=8),
       counted=st.lists(st.booleans(), min_size=10, max_size=10))
def test_the_summarys_gap_statistics_are_the_weighted_distributions_bit_for_bit(
        runs, singles, counted):
    """`_itl_distribution` (sorted by one stable argsort, in place of the arrays) gives the
    very numbers of `weighted_distribution` on the same values and weights. Gaps repeat, so
    the weights' order among equal values — which the mean's rounding sees — is exercised."""
    from batchsim.metrics.summary import _itl_distribution, weighted_distribution
    from batchsim.sim.recorder import RunRecord

    record = RunRecord()
    for ids, gaps in runs:
        record.itl.add_run(np.array(ids), np.array(gaps))
    for request_id, gap in singles:
        record.itl.add_singles(np.array([request_id]), np.array([gap]))
    mask = np.array(counted)
    values, weights = record.itl.values_and_weights(mask)
    expected = weighted_distribution(values, weights)
    expected["max"] = float(values.max()) if values.size else None  # the largest gap seen
    assert _itl_distribution(record, mask)[0] == expected  # exact: same floats, same None


@settings(max_examples=200, deadline=None)
@given(runs=st.lists(st.tuples(_ids, _gaps), max_size=6),
       singles=st.lists(st.tuples(st.integers(0, 9), st.floats(0.001, 1.0)), max_size=8),
       order=st.randoms(use_true_random=False))
def test_each_requests_gaps_are_the_ones_it_saw(runs, singles, order):
    """Per request: the multiset of its gaps, lone ones in the order they came."""
    log = ITLLog()
    seen: dict[int, list[float]] = {i: [] for i in range(10)}
    lone: dict[int, list[float]] = {i: [] for i in range(10)}
    entries = [("run", r) for r in runs] + [("single", s) for s in singles]
    order.shuffle(entries)
    for kind, entry in entries:
        if kind == "run":
            ids, gaps = entry
            log.add_run(np.array(ids), np.array(gaps))
            for i in ids:
                seen[i] += gaps
        else:
            request_id, gap = entry
            log.add_singles(np.array([request_id]), np.array([gap]))
            seen[request_id].append(gap)
            lone[request_id].append(gap)
    by_request = log.gaps_by_request(10)
    for request_id in range(10):
        assert sorted(by_request[request_id]) == sorted(seen[request_id])
        assert by_request[request_id][:len(lone[request_id])] == lone[request_id]
