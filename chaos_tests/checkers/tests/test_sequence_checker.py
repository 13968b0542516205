"""sequence-order: a producer's sequenced values `<producer>-<n>` in send order in every
partition's final log, acknowledged or not."""

from chaos_tests.checkers import OK, UNKNOWN, History, check_all
from chaos_tests.checkers.checks import parse_sequenced, sequence_order


def history(final: list[tuple[str, int, int]]) -> History:
    h = History()
    h.produce("ck-1", 1, OK, 0, process="ck-1", time=1)
    h.produce("ck-4", 1, UNKNOWN, process="ck-1", time=2, error="timeout")
    h.produce("kp-1", 1, OK, 1, process="kp-1", time=2)
    for v, p, o in final:
        h.consume(v, p, o, final=True)
    return h


def test_parse_sequenced():
    assert parse_sequenced("my-writer-12") == ("my-writer", 12)
    assert parse_sequenced("12") is None and parse_sequenced("a-b") is None


def test_in_order_log_passes_interleaved_producers():
    h = history([("ck-1", 1, 0), ("kp-1", 1, 1), ("ck-4", 1, 2)])
    assert sequence_order(h).ok
    assert all(r.ok for r in check_all(h, idempotent=True, sequenced=True))


def test_unacknowledged_value_appended_twice_is_caught():
    # the in-doubt ck-4 landed twice: lost-write and order see nothing wrong with acked values
    h = history([("ck-1", 1, 0), ("kp-1", 1, 1), ("ck-4", 1, 2), ("ck-4", 1, 3)])
    assert not sequence_order(h).ok
    failed = {r.name for r in check_all(h, idempotent=False, sequenced=True) if not r.ok}
    assert failed == {"sequence-order"}


def test_retry_appended_after_a_later_batch_is_caught():
    h = history([("ck-4", 1, 0), ("ck-1", 1, 1), ("kp-1", 1, 2)])
    result = sequence_order(h)
    assert not result.ok and "#1" in str(result)


def test_off_by_default_and_without_final_read():
    h = history([("ck-4", 1, 0), ("ck-4", 1, 1)])
    assert "sequence-order" not in {r.name for r in check_all(h)}
    h2 = History()
    assert not sequence_order(h2).ok            # cannot judge without a final read


def test_foreign_values_reported():
    assert not sequence_order(history([("nonsense", 0, 0)])).ok
