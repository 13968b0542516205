"""Recorded histories of produce/consume operations and the checkers that judge them.

Both the live tests (`chaos_tests/live`) and the deterministic simulation (`chaos_tests/sim`)
record into a `History`; `check_all` runs every checker and names each violation.
"""

from chaos_tests.checkers.history import History, Consume, Produce, FAIL, OK, UNKNOWN
from chaos_tests.checkers.checks import CheckFailed, CheckResult, check_all, assert_valid
from chaos_tests.checkers.txn import ABORTED, COMMITTED, IN_DOUBT, Txn, assert_transactions, \
    check_transactions

__all__ = ["History", "Produce", "Consume", "OK", "FAIL", "UNKNOWN", "CheckResult",
           "CheckFailed", "check_all", "assert_valid", "Txn", "COMMITTED", "ABORTED", "IN_DOUBT",
           "check_transactions", "assert_transactions"]
