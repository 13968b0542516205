"""A broker's load report (load_report.py): full to a new peer, changes only after that, due on
an interval, and a lost or misdelivered report never leaves the controller with a wrong base."""

from partition_server.load_report import GRANULARITY_BYTES, LoadReporter, by_topic

MiB = 1 << 20


def test_full_first_then_only_real_changes():
    r = LoadReporter(interval_ms=1000)
    a = object()                                     # a heartbeat connection
    sizes = {("t", 0): 0, ("t", 1): 10 * MiB}
    assert r.due(0, a)
    full, sent = r.report(sizes, a)
    assert full and sent == sizes
    r.delivered(full, sent, a, now_ms=0)
    assert not r.due(999, a) and r.due(1000, a)
    sizes = {("t", 0): GRANULARITY_BYTES - 1,        # under 1 MiB of change: not worth saying
             ("t", 1): 10 * MiB + 600 * 1024,       # < 1 MiB and < 5 %: not either
             ("t", 2): 5}                            # newly led here: said
    assert r.report(sizes, a) == (False, {("t", 2): 5})
    sizes[("t", 1)] = 12 * MiB
    full, sent = r.report(sizes, a)
    assert not full and sent == {("t", 1): 12 * MiB, ("t", 2): 5}


def test_a_new_connection_gets_a_full_report_and_a_lost_one_is_resent():
    r = LoadReporter(interval_ms=1000)
    a, b = object(), object()
    full, sent = r.report({("t", 0): 3 * MiB}, a)
    # the heartbeat timed out: nothing delivered, so the next is full again
    assert r.report({("t", 0): 3 * MiB}, a)[0]
    r.delivered(full, sent, a, 0)
    assert r.due(10, b)                              # the active controller moved
    assert r.report({("t", 0): 3 * MiB}, b) == (True, {("t", 0): 3 * MiB})
    assert r.report({("t", 0): 3 * MiB}, None)[0]   # not connected yet: full


def test_a_change_list_answered_by_another_controller_forces_a_full_report():
    r = LoadReporter(interval_ms=1000)
    a, b = object(), object()
    r.delivered(*r.report({("t", 0): MiB}, a), a, 0)
    full, sent = r.report({("t", 0): 9 * MiB}, a)
    assert not full
    r.delivered(full, sent, b, 1000)                 # call_active fell over to b meanwhile
    assert r.report({("t", 0): 9 * MiB}, b)[0]


def test_by_topic_is_the_wire_shape():
    assert by_topic({("b", 1): 2, ("a", 3): 1, ("b", 0): 4}) == {"a": [(3, 1)],
                                                                 "b": [(0, 4), (1, 2)]}
