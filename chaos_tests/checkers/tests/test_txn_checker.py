"""The transaction checkers pass a good history and catch each crafted bad one."""

import pytest

from chaos_tests.checkers import ABORTED, COMMITTED, IN_DOUBT, CheckFailed, History, Txn
from chaos_tests.checkers import assert_transactions, check_transactions

TXNS = [Txn("t0", COMMITTED, ["a", "b"]), Txn("t1", ABORTED, ["c", "d"]),
        Txn("t2", IN_DOUBT, ["e", "f"]), Txn("t3", IN_DOUBT, ["g", "h"])]


def reads(final, live=()) -> History:
    h = History()
    for v, p, o in live:
        h.consume(v, p, o, process="reader")
    for v, p, o in final:
        h.consume(v, p, o, final=True, process="final")
    return h


GOOD_FINAL = [("a", 0, 0), ("b", 1, 0), ("e", 0, 3), ("f", 1, 3)]   # t2 landed, t3 did not


def failed(history, txns=TXNS):
    return {r.name for r in check_transactions(txns, history) if not r.ok}


def test_good_history_passes():
    assert failed(reads(GOOD_FINAL, live=[("a", 0, 0)])) == set()
    assert_transactions(TXNS, reads(GOOD_FINAL))


@pytest.mark.parametrize("final, live, name", [
    (GOOD_FINAL + [("c", 0, 5)], (), "aborted-read"),
    (GOOD_FINAL, [("d", 1, 7)], "aborted-read"),                   # seen live, gone later
    ([("a", 0, 0), ("e", 0, 3), ("f", 1, 3)], (), "lost-committed-txn"),
    (GOOD_FINAL + [("g", 0, 4)], (), "partial-txn"),
    (GOOD_FINAL + [("a", 0, 9)], (), "duplicate"),
    (GOOD_FINAL + [("zz", 0, 9)], (), "phantom-read"),
    (GOOD_FINAL, [("b", 1, 1)], "truncated-read"),
])
def test_each_violation_caught(final, live, name):
    assert name in failed(reads(final, live))
    with pytest.raises(CheckFailed):
        assert_transactions(TXNS, reads(final, live))


def test_without_final_read_committed_txns_cannot_be_judged():
    assert "lost-committed-txn" in failed(reads([]))


def test_a_complete_final_read_of_nothing_is_judged():
    # campaign kill seed 50 round 59: the one transaction of the round aborted and the final
    # read_committed reached every partition's end with nothing to read; that is a verdict
    # (nothing committed, nothing lost), not a missing read
    only_aborted = [Txn("t1", ABORTED, ["c", "d"])]
    empty = reads([])
    assert "lost-committed-txn" in failed(empty, only_aborted)    # no read done: cannot judge
    empty.final_read_complete = True
    assert failed(empty, only_aborted) == set()
    # and a committed transaction missing from a complete, empty final read is lost
    assert "lost-committed-txn" in failed(empty, TXNS)


def test_unknown_outcome_refused():
    with pytest.raises(ValueError):
        Txn("t", "ok", [])


def test_short_form_for_value_only_tests():
    from chaos_tests.checkers.txn import assert_final_values
    written = {0: ["a", "b"], 1: ["c", "d"]}
    assert_final_values({0: "ok", 1: "aborted"}, written, ["a", "b"])
    assert_final_values({0: "unknown", 1: "unknown"}, written, ["c", "d"])
    for outcomes, seen in [({0: "ok", 1: "aborted"}, ["a"]),
                           ({0: "ok", 1: "aborted"}, ["a", "b", "c", "d"]),
                           ({0: "ok", 1: "unknown"}, ["a", "b", "b"]),
                           ({0: "ok", 1: "unknown"}, ["a", "b", "x"])]:
        with pytest.raises(CheckFailed):
            assert_final_values(outcomes, written, seen)
