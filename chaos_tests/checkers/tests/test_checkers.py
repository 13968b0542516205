"""Each checker passes a good history and fails a crafted bad one (a checker that cannot fail
proves nothing)."""

import pytest

from chaos_tests.checkers import FAIL, OK, UNKNOWN, CheckFailed, History, assert_valid, check_all
from chaos_tests.checkers import checks


def good() -> History:
    h = History()
    h.produce("a", 0, OK, 0, time=1)
    h.produce("b", 0, UNKNOWN, time=2, error="REQUEST_TIMED_OUT")   # in doubt, it did land
    h.produce("c", 0, OK, 2, time=3)
    h.produce("x", 0, FAIL, time=4, error="NOT_ENOUGH_REPLICAS")
    h.produce("d", 1, OK, 0, time=4, process="p1")
    h.consume("a", 0, 0, time=2)
    h.consume("b", 0, 1, time=3)
    h.consume("c", 0, 2, time=5)
    for v, p, o in [("a", 0, 0), ("b", 0, 1), ("c", 0, 2), ("d", 1, 0)]:
        h.consume(v, p, o, final=True, process="verify")
    return h


def names(results):
    return {r.name for r in results if not r.ok}


def test_good_history_passes_every_checker():
    results = check_all(good(), idempotent=True)
    assert all(r.ok for r in results), [str(r) for r in results]
    assert_valid(good(), idempotent=True)


def test_lost_write_detected():
    h = good()
    h.ops = [op for op in h.ops if not (getattr(op, "final", False) and op.value == "c")]
    assert names(check_all(h)) == {"lost-write", "truncated-read"}
    assert "acked 'c' at 0/2 is missing" in checks.lost_writes(h).errors[0]


def test_acked_record_replaced_is_lost_and_inconsistent():
    h = good()
    for op in h.final_reads:
        if op.value == "c":
            op.value = "z"
    bad = names(check_all(h))
    assert {"lost-write", "inconsistent-offsets", "truncated-read"} <= bad


def test_inconsistent_offsets_between_two_consumers():
    h = good()
    h.consume("q", 0, 1, process="c1", time=3)
    r = checks.inconsistent_offsets(h)
    assert not r.ok and "0/1 holds 'b' and 'q'" in r.errors[0]


def test_nonmonotonic_send_detected():
    h = History()
    h.produce("a", 0, OK, 5, time=1)
    h.produce("b", 0, OK, 3, time=2)
    assert not checks.nonmonotonic_send(h).ok
    # other producers or partitions are independent
    h2 = History()
    h2.produce("a", 0, OK, 5, time=1)
    h2.produce("b", 0, OK, 3, time=2, process="p1")
    h2.produce("c", 1, OK, 0, time=3)
    assert checks.nonmonotonic_send(h2).ok


def test_order_in_final_log_detected():
    h = History()
    h.produce("a", 0, OK, 0, time=1)
    h.produce("b", 0, OK, 1, time=2)
    h.consume("b", 0, 0, final=True)
    h.consume("a", 0, 1, final=True)
    assert not checks.order(h).ok


def test_duplicate_only_judged_for_idempotent_runs():
    h = good()
    h.consume("a", 0, 3, final=True, process="verify")
    assert "duplicate" not in names(check_all(h, idempotent=False))
    assert "duplicate" in names(check_all(h, idempotent=True))
    assert checks.duplicates(h).errors == ["'a' at 0/[0, 3]"]


def test_read_of_later_truncated_record_detected():
    h = good()
    h.consume("y", 0, 3, time=6)          # a consumer saw offset 3; the final log ends at 2
    r = checks.truncated_reads(h)
    assert not r.ok and "nothing" in r.errors[0]


def test_failed_write_must_never_be_read():
    h = good()
    h.consume("x", 0, 3, final=True)
    assert not checks.failed_write_reads(h).ok


def test_consumer_going_backwards_detected():
    h = good()
    h.consume("a", 0, 0, time=7)
    assert not checks.nonmonotonic_poll(h).ok


def test_final_log_checks_refuse_to_pass_without_a_final_read():
    h = History()
    h.produce("a", 0, OK, 0)
    assert {"lost-write", "order", "truncated-read"} <= names(check_all(h))


def test_json_lines_round_trip_and_dump_on_failure(tmp_path):
    h = good()
    again = History.loads(h.dumps())
    assert again.dumps() == h.dumps()
    h.consume("y", 0, 3, time=6)
    with pytest.raises(CheckFailed, match="truncated-read"):
        assert_valid(h, dump_to=tmp_path / "h.jsonl")
    assert len(History.load(tmp_path / "h.jsonl")) == len(h)


def test_ack_without_an_offset_is_judged_by_value():
    h = good()
    h.produce("e", 0, OK, None, time=8)
    assert "lost-write" in names(check_all(h))
    h.consume("e", 0, 3, final=True)
    assert all(r.ok for r in check_all(h, idempotent=True))


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="outcome"):
        History().produce("a", 0, "maybe")
    with pytest.raises(ValueError, match="only an acknowledged"):
        History().produce("a", 0, FAIL, 3)
    with pytest.raises(ValueError, match="negative"):
        History().produce("a", 0, OK, -1001)
    with pytest.raises(ValueError, match="line 1"):
        History.loads('{"kind": "nope"}\n')
