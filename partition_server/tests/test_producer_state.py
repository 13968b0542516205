"""Idempotent producer state: duplicates, gaps, epochs, window, rebuild."""

from partition_server.txn.producer_state import ProducerStateManager
from wire.errors import ErrorCode


def test_sequence_rules():
    s = ProducerStateManager()
    assert s.check(-1, -1, -1, -1).error == ErrorCode.NONE          # not idempotent
    assert s.check(7, 0, 5, 9).error == ErrorCode.UNKNOWN_PRODUCER_ID
    assert s.check(7, 0, 0, 4).error == ErrorCode.NONE
    s.update(7, 0, 0, 4, 100, 104)
    dup = s.check(7, 0, 0, 4)
    assert dup.duplicate_of.first_offset == 100 and dup.duplicate_of.last_offset == 104
    assert s.check(7, 0, 6, 9).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert s.check(7, 0, 5, 9).error == ErrorCode.NONE
    s.update(7, 0, 5, 9, 105, 109)
    assert s.check(7, -1, 10, 10).error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert s.check(7, 1, 3, 3).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert s.check(7, 1, 0, 0).error == ErrorCode.NONE               # epoch bump restarts at 0


def test_window_of_five_and_truncation():
    s = ProducerStateManager()
    for i in range(7):
        s.update(1, 0, i, i, 10 + i, 10 + i)
    assert s.check(1, 0, 6, 6).duplicate_of is not None
    assert s.check(1, 0, 2, 2).duplicate_of is not None
    assert s.check(1, 0, 1, 1).duplicate_of is None                  # left the window
    assert s.reaches(16) and not s.reaches(17)                      # what a truncation changes
