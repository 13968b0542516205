"""The transaction timeout check looks only at due transactions (txn/timeouts.py) and decides
exactly what the full scan over every transactional id decided (the reference below)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from partition_server.txn import state as S
from partition_server.txn.timeouts import ABORT, EXPIRE, TxnTable, timeout_actions

EXPIRATION = 1000


def meta(tid, state, start, update, timeout=100):
    return S.TransactionMetadata(tid, 1, 0, timeout, state, txn_start_ms=start,
                                 last_update_ms=update)


def full_scan(table, now, owned):
    """The check as it was: every transactional id, every tick."""
    return timeout_actions(list(table.items()), now, EXPIRATION, owned)


def test_due_transactions_only_and_again_until_they_change():
    t = TxnTable(EXPIRATION)
    t["a"] = meta("a", S.TxnState.ONGOING, 0, 0)                  # aborts after 100 ms
    t["b"] = meta("b", S.TxnState.COMPLETE_COMMIT, 0, 50)         # expires after 1050 ms
    t["c"] = meta("c", S.TxnState.PREPARE_COMMIT, 0, 0)           # never by the check
    yes = lambda tid: True                                       # noqa: E731
    assert t.due(100) == [] and timeout_actions(t.due(100), 100, EXPIRATION, yes) == []
    assert timeout_actions(t.due(101), 101, EXPIRATION, yes) == [(ABORT, "a")]
    # nothing changed "a" (its abort still running): acted on again, as the full scan did
    assert timeout_actions(t.due(102), 102, EXPIRATION, yes) == [(ABORT, "a")]
    t["a"] = meta("a", S.TxnState.PREPARE_ABORT, 0, 102)
    assert t.due(1050) == []
    assert timeout_actions(t.due(1051), 1051, EXPIRATION, yes) == [(EXPIRE, "b")]
    del t["b"]
    assert t.due(5000) == []
    assert full_scan(t, 5000, yes) == []


def test_the_heap_stays_bounded_under_many_state_changes():
    t = TxnTable(EXPIRATION)
    for i in range(10_000):          # a busy producer: each state change files an entry
        t["a"] = meta("a", S.TxnState.ONGOING if i % 2 else S.TxnState.COMPLETE_COMMIT, i, i)
    assert t.heap_size() <= 2 * len(t) + 65


STATES = list(S.TxnState)
steps = st.lists(st.one_of(
    st.tuples(st.just("set"), st.integers(0, 5), st.sampled_from(STATES), st.integers(0, 3000),
              st.integers(0, 3000), st.integers(1, 500)),
    st.tuples(st.just("del"), st.integers(0, 5)),
    st.tuples(st.just("own"), st.integers(0, 5)),
    st.tuples(st.just("tick"), st.integers(0, 700))), max_size=60)


@settings(max_examples=200, deadline=None)
@given(steps)
def test_random_sequences_decide_like_the_full_scan(ops):
    t, now, disowned = TxnTable(EXPIRATION), 0, set()
    owned = lambda tid: tid not in disowned                     # noqa: E731
    for op in ops:
        if op[0] == "set":
            _, k, state, start, update, timeout = op
            t[f"t{k}"] = meta(f"t{k}", state, start - 100 if k == 5 else start, update, timeout)
        elif op[0] == "del":
            t.pop(f"t{op[1]}", None)
        elif op[0] == "own":
            disowned ^= {f"t{op[1]}"}
        else:
            now += op[1]
            got = timeout_actions(t.due(now), now, EXPIRATION, owned)
            assert sorted(got) == sorted(full_scan(t, now, owned))
            assert len(got) == len(set(got))
