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


def test_a_big_full_report_goes_out_in_parts_full_on_the_last():
    r = LoadReporter(interval_ms=1000, max_partitions=2)
    a = object()
    sizes = {("t", p): p * MiB for p in range(5)}
    seen: dict = {}
    parts = []
    while True:
        assert r.due(0, a)                           # every heartbeat until it is whole
        full, sent = r.report(sizes, a)
        assert len(sent) <= 2
        parts.append(full)
        seen.update(sent)
        r.delivered(full, sent, a, 0)
        if full:
            break
    assert parts == [False, False, True] and seen == sizes
    assert not r.due(999, a)
    assert r.report(sizes, a) == (False, {})         # the peer holds all of it


def test_a_part_lost_is_sent_again_and_a_new_peer_starts_over():
    r = LoadReporter(interval_ms=1000, max_partitions=2)
    a, b = object(), object()
    sizes = {("t", p): MiB for p in range(4)}
    first = r.report(sizes, a)
    r.delivered(*first, a, 0)
    second = r.report(sizes, a)
    assert not set(second[1]) & set(first[1])
    # `second` timed out: not delivered, so the same part is computed again
    assert r.report(sizes, a) == second
    # the active controller moved before the report was whole: b gets every part
    full, sent = r.report(sizes, b)
    assert not full and sent == first[1]


def test_a_change_list_longer_than_a_part_goes_on_at_the_next_heartbeat():
    r = LoadReporter(interval_ms=1000, max_partitions=2)
    a = object()
    r.delivered(*r.report({("t", 0): MiB}, a), a, 0)
    grown = {("t", p): MiB for p in range(5)}        # four partitions newly led here
    full, sent = r.report(grown, a)
    assert not full and len(sent) == 2
    r.delivered(full, sent, a, 10)
    assert r.due(20, a)                              # not only after the interval
    full, sent2 = r.report(grown, a)
    assert len(sent2) == 2 and not set(sent) & set(sent2)
    r.delivered(full, sent2, a, 30)
    assert r.report(grown, a) == (False, {})
    assert not r.due(40, a)


def test_a_heartbeat_of_a_broker_leading_31000_partitions_stays_small():
    """Two of three brokers down at 30,000 partitions: the third leads all 31,000. Its report
    in one heartbeat was 400 KB, most of which a busy controller left unacknowledged in the
    socket; the heartbeat was given up, its connection closed, and the controller fenced the
    one live broker for it. Parts of MAX_REPORT_PARTITIONS keep every heartbeat small."""
    from partition_server.controller_client import ControllerClient
    from wire.messages.api_keys import ApiKey
    from wire.messages.index_generated import REQUESTS
    c = ControllerClient(0, {3000: ("127.0.0.1", 1)}, "127.0.0.1", 9092, None)
    c.led_sizes = lambda: {(f"idle-{t:04d}", p): 123456 for t in range(310) for p in range(100)}
    c._heartbeat_conns[3000] = peer = object()     # its heartbeat connection
    cls = REQUESTS[ApiKey.BROKER_HEARTBEAT]
    sizes, parts = [], 0
    while True:
        req = cls(broker_id=0, broker_epoch=1, current_metadata_offset=5, want_fence=False,
                  want_shut_down=False, offline_log_dirs=[])
        full, sent = c._load_report(req)
        sizes.append(sum(len(chunk) for chunk in req.encode_chunks(1)))
        c.load_reporter.delivered(full, sent, peer, 0)
        parts += 1
        if full or parts > 100:
            break
    assert parts == 16 and max(sizes) < 32 * 1024
