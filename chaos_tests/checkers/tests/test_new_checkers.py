"""The checkers added for the campaign (issue 20): each fails a hand-made history holding its
anomaly and passes a clean one."""

import math

import pytest

from chaos_tests.checkers import History, OK
from chaos_tests.checkers.elle import TxnOp, check_cycles, dependency_graph, final_log_of
from chaos_tests.checkers.groups import GroupCommit, GroupRead, check_groups
from chaos_tests.checkers.linear import check_linearizable
from chaos_tests.checkers.logs import key_order, offsets_dense
from chaos_tests.checkers.ops import FAIL, INFO, OpLog


# -- offsets dense per leader epoch ----------------------------------------------------------

def log(*entries):
    h = History()
    for partition, offset, value, epoch in entries:
        h.consume(value, partition, offset, final=True, epoch=epoch)
    return h


def test_dense_offsets_pass_across_epochs():
    h = log((0, 0, "a", 1), (0, 1, "b", 1), (0, 2, "c", 3), (1, 0, "d", 2))
    assert offsets_dense(h).ok


def test_hole_in_the_log_is_reported_with_its_epoch():
    r = offsets_dense(log((0, 0, "a", 1), (0, 1, "b", 1), (0, 3, "c", 2)))
    assert r.errors == ["partition 0 offset 3 (epoch 2): hole, offsets 2..2 missing"]


def test_offset_read_twice_and_epoch_going_back_are_reported():
    r = offsets_dense(log((0, 0, "a", 2), (0, 1, "b", 1), (0, 1, "x", 1)))
    assert len(r.errors) == 2
    assert "leader epoch went down from 2" in r.errors[0]
    assert "read twice ('x')" in r.errors[1]


def test_offsets_dense_needs_a_final_read():
    assert not offsets_dense(History()).ok


# -- per-key order ---------------------------------------------------------------------------

def keyed(final_order):
    h = History()
    h.produce("a", 0, OK, 0, key="k", time=1)
    h.produce("b", 0, OK, 1, key="k", time=2)
    h.produce("c", 1, OK, 0, key="j", time=3)
    for partition, offset, value, key in final_order:
        h.consume(value, partition, offset, final=True, key=key)
    return h


def test_key_order_passes_when_kept():
    assert key_order(keyed([(0, 0, "a", "k"), (0, 1, "b", "k"), (1, 0, "c", "j")])).ok


def test_key_order_inversion_detected():
    r = key_order(keyed([(0, 0, "b", "k"), (0, 1, "a", "k"), (1, 0, "c", "j")]))
    assert len(r.errors) == 1 and "'b' (offset 0) acked after 'a'" in r.errors[0]


def test_key_in_two_partitions_detected():
    r = key_order(keyed([(0, 0, "a", "k"), (0, 1, "b", "k"), (1, 0, "c", "k")]))
    assert r.errors == ["key 'k' in partitions [0, 1]"]


def test_consumer_reading_a_key_backwards_detected():
    h = keyed([(0, 0, "a", "k"), (0, 1, "b", "k"), (1, 0, "c", "j")])
    h.consume("b", 0, 1, key="k", process="c0")
    h.consume("a", 0, 0, key="k", process="c0")
    assert "read key 'k' at offset 0 after offset 1" in key_order(h).errors[0]


# -- consumer groups -------------------------------------------------------------------------

def test_groups_clean_history_passes():
    reads = [GroupRead("g", 1, "m1", 0, 0), GroupRead("g", 1, "m2", 1, 0),
             GroupRead("g", 2, "m2", 0, 0)]          # reprocessed in a later generation: fine
    commits = [GroupCommit("g", 1, "m1", 0, 1, time=1), GroupCommit("g", 2, "m2", 0, 1, time=2),
               GroupCommit("g", 2, "m2", 0, 5, time=3),
               GroupCommit("g", 1, "m1", 0, 0, outcome="fail", time=4)]   # fenced: refused
    assert all(r.ok for r in check_groups(reads, commits))


def test_committed_offset_going_back_detected():
    commits = [GroupCommit("g", 1, "m1", 0, 7, time=1),
               GroupCommit("g", 0, "?", 0, 3, time=2, fetched=True)]
    bad = [r for r in check_groups([], commits) if not r.ok]
    assert [r.name for r in bad] == ["committed-offset-regress"]
    assert "3 fetched" in bad[0].errors[0]


def test_record_processed_by_two_members_of_a_generation_detected():
    reads = [GroupRead("g", 3, "m1", 0, 4), GroupRead("g", 3, "m2", 0, 4)]
    bad = [r for r in check_groups(reads, []) if not r.ok]
    assert [r.name for r in bad] == ["double-processing"]
    assert "0/4 processed by ['m1', 'm2']" in bad[0].errors[0]


def test_stale_generation_commit_accepted_detected():
    commits = [GroupCommit("g", 2, "m2", 0, 5, time=1), GroupCommit("g", 1, "m1", 1, 9, time=2)]
    bad = [r.name for r in check_groups([], commits) if not r.ok]
    assert bad == ["stale-commit-accepted"]


# -- transactions: dependency cycles -----------------------------------------------------------

def test_serial_transactions_have_no_cycle():
    txns = [TxnOp("T1", writes=[(0, "a"), (1, "x")]),
            TxnOp("T2", writes=[(0, "b")], reads=[(1, ["x"])]),
            TxnOp("T3", writes=[(1, "y")], reads=[(0, ["a", "b"])])]
    final = {0: ["a", "b"], 1: ["x", "y"]}
    assert check_cycles(txns, final).ok
    edges = dependency_graph(txns, final)
    assert edges[("T1", "T2")] == {"ww", "wr"} and edges[("T2", "T3")] == {"wr", "rw"}   # T2 read p1 before y


def test_g0_write_cycle_detected():
    # T1 before T2 on partition 0, T2 before T1 on partition 1: their appends interleaved
    txns = [TxnOp("T1", writes=[(0, "a"), (1, "y")]), TxnOp("T2", writes=[(0, "b"), (1, "x")])]
    r = check_cycles(txns, {0: ["a", "b"], 1: ["x", "y"]})
    assert len(r.errors) == 1 and r.errors[0].startswith("G0: ")


def test_g1c_circular_information_flow_detected():
    # T2 read T1's write, T1's value comes after T2's elsewhere (T1 wrote after T2 there)
    txns = [TxnOp("T1", writes=[(0, "a"), (1, "y")]),
            TxnOp("T2", writes=[(1, "x")], reads=[(0, ["a"])])]
    r = check_cycles(txns, {0: ["a"], 1: ["x", "y"]})
    assert r.errors == ["G1c: T1 -wr-> T2 -ww-> T1"]


def test_g_single_read_skew_detected():
    # T1 writes a (p0) and b (p1). T2 saw b on p1 but read p0 without a: it saw part of T1.
    txns = [TxnOp("T0", writes=[(0, "z")]),
            TxnOp("T1", writes=[(0, "a"), (1, "b")]),
            TxnOp("T2", reads=[(0, ["z"]), (1, ["b"])])]
    r = check_cycles(txns, {0: ["z", "a"], 1: ["b"]})
    assert r.errors == ["G-single: T1 -wr-> T2 -rw-> T1"] or \
        r.errors == ["G-single: T2 -rw-> T1 -wr-> T2"]


def test_g2_write_skew_detected():
    # each read the other's partition before the other's write, then wrote its own
    txns = [TxnOp("T1", writes=[(0, "a")], reads=[(1, [])]),
            TxnOp("T2", writes=[(1, "b")], reads=[(0, [])])]
    r = check_cycles(txns, {0: ["a"], 1: ["b"]})
    assert len(r.errors) == 1 and r.errors[0].startswith("G2: ")


def test_aborted_transactions_are_not_nodes():
    txns = [TxnOp("T1", writes=[(0, "a")], reads=[(1, [])]),
            TxnOp("T2", writes=[(1, "b")], reads=[(0, [])], committed=False)]
    assert check_cycles(txns, {0: ["a"], 1: []}).ok


def test_final_log_of_a_history():
    h = History()
    h.consume("b", 0, 5, final=True)
    h.consume("a", 0, 2, final=True)
    h.consume("c", 1, 0, final=True)
    h.consume("zz", 1, 1)                    # not final
    assert final_log_of(h) == {0: ["a", "b"], 1: ["c"]}


# -- metadata linearizability ----------------------------------------------------------------

def oplog(entries):
    """(process, f, key, arg, start, end, type, result/error)."""
    log = OpLog()
    for process, f, key, arg, start, end, type_, res in entries:
        i = log.invoke(process, f, (key, arg), start)
        if end is None:
            continue                         # never completed: info
        if type_ == FAIL:
            log.complete(i, FAIL, end, error=res)
        else:
            log.complete(i, type_, end, result=res)
    return log.operations()


def test_topic_history_linearizable():
    ops = oplog([("a", "create", "t", None, 0, 1, "ok", None),
                 ("b", "create", "t", None, 0.5, 2, FAIL, "TOPIC_ALREADY_EXISTS"),
                 ("a", "delete", "t", None, 3, 4, "ok", None),
                 ("b", "read", "t", None, 3.5, 5, "ok", False),
                 ("b", "delete", "t", None, 6, 7, FAIL, "UNKNOWN_TOPIC_OR_PARTITION"),
                 ("c", "create", "t", None, 6.5, None, None, None),     # timed out: in doubt
                 ("a", "read", "t", None, 8, 9, "ok", True)])           # ... it took effect
    assert check_linearizable(ops, "topics").ok


def test_concurrent_ops_may_take_effect_in_either_order():
    ops = oplog([("a", "create", "t", None, 0, 5, "ok", None),
                 ("b", "read", "t", None, 1, 2, "ok", False),
                 ("c", "read", "t", None, 3, 4, "ok", True)])
    assert check_linearizable(ops, "topics").ok


def test_stale_read_after_create_acknowledged_is_not_linearizable():
    ops = oplog([("a", "create", "t", None, 0, 1, "ok", None),
                 ("b", "read", "t", None, 2, 3, "ok", False)])
    r = check_linearizable(ops, "topics")
    assert len(r.errors) == 1 and "key 't': not linearizable" in r.errors[0]
    assert "#1 b read(None) → False" in r.errors[0]


def test_two_creates_both_acknowledged_are_not_linearizable():
    ops = oplog([("a", "create", "t", None, 0, 2, "ok", None),
                 ("b", "create", "t", None, 1, 3, "ok", None)])
    assert not check_linearizable(ops, "topics").ok


def test_in_doubt_create_may_never_happen_but_cannot_happen_twice():
    ok = oplog([("a", "create", "t", None, 0, None, None, None),
                ("b", "read", "t", None, 5, 6, "ok", False)])
    assert check_linearizable(ok, "topics").ok
    bad = oplog([("a", "create", "t", None, 0, None, None, None),
                 ("b", "read", "t", None, 5, 6, "ok", True),
                 ("b", "read", "t", None, 7, 8, "ok", False)])
    assert not check_linearizable(bad, "topics").ok


def test_config_register_lost_write_and_clean_history():
    clean = oplog([("a", "write", ("t", "retention.ms"), "1", 0, 1, "ok", None),
                   ("b", "write", ("t", "retention.ms"), "2", 0.5, 1.5, "ok", None),
                   ("c", "read", ("t", "retention.ms"), None, 2, 3, "ok", "2")])
    assert check_linearizable(clean, "register").ok
    lost = oplog([("a", "write", ("t", "retention.ms"), "1", 0, 1, "ok", None),
                  ("b", "write", ("t", "retention.ms"), "2", 2, 3, "ok", None),
                  ("c", "read", ("t", "retention.ms"), None, 4, 5, "ok", "1")])
    assert not check_linearizable(lost, "register").ok


def test_keys_are_judged_apart_and_other_failures_left_out():
    ops = oplog([("a", "create", "t1", None, 0, 1, "ok", None),
                 ("a", "create", "t2", None, 0, 1, FAIL, "INVALID_REPLICATION_FACTOR"),
                 ("b", "read", "t2", None, 2, 3, "ok", False),
                 ("b", "read", "t1", None, 2, 3, "ok", True)])
    assert check_linearizable(ops, "topics").ok


def test_op_log_pairs_events_and_round_trips():
    log = OpLog()
    i = log.invoke("p", "create", ("t", None), 1.0)
    j = log.invoke("q", "read", ("t", None), 1.5)
    log.complete(j, "ok", 2.0, result=True)
    log.complete(i, INFO, 3.0, error="REQUEST_TIMED_OUT")
    ops = log.operations()
    assert [(o.f, o.type, o.end) for o in ops] == [("create", INFO, math.inf), ("read", "ok", 2.0)]
    with pytest.raises(ValueError):
        log.complete(i, "ok", 4.0)
    again = OpLog.loads(log.dumps())
    assert [(o.f, o.type, o.result) for o in again.operations()] == \
        [("create", INFO, None), ("read", "ok", True)]


def test_concurrent_commits_are_not_ordered_but_later_ones_are():
    # the older member's answer arrived late (t=5) though the coordinator took it first
    concurrent = [GroupCommit("g", 1, "m1", 0, 50, time=5, start=1),
                  GroupCommit("g", 2, "m2", 0, 120, time=3, start=2)]
    assert check_groups([], concurrent)[0].ok
    after = concurrent + [GroupCommit("g", 0, "?", 0, 50, time=7, start=6, fetched=True)]
    r = check_groups([], after)[0]
    assert not r.ok and "50 fetched at t=6.000..7.000 after 120" in r.errors[0]
