"""Client-side errors and their retry classification.

Broker answers carry Kafka error codes; `wire.errors` already knows, for each code, whether it is
retriable and whether it means our metadata is stale. The client adds the failures that never
reach a broker (cannot connect, connection dropped, timed out) and one place — `classify` — that
every retry loop (producer sender, admin calls, the consumer) asks, so they all agree on what is
worth another attempt and when to refresh metadata first.
"""

from __future__ import annotations

import enum

import trio

from clients.connection import ConnectionClosed
from wire.errors import ErrorCode, KafkaError, error_for_code

__all__ = ["KafkaError", "ErrorCode", "ClientError", "KafkaConnectionError", "KafkaTimeoutError",
           "NoBrokersAvailable", "UnknownTopicError", "Retry", "classify", "raise_for_code",
           "check", "is_retriable"]


class ClientError(KafkaError):
    """An error raised by the client itself rather than answered by a broker."""


class KafkaConnectionError(ClientError):
    """A broker could not be reached or dropped the connection; retriable after a metadata
    refresh (the node may be gone, or leadership may have moved)."""

    code = ErrorCode.NETWORK_EXCEPTION
    retriable = True
    invalid_metadata = True


class KafkaTimeoutError(ClientError):
    """An operation did not finish within its deadline (request.timeout.ms, delivery.timeout.ms,
    max.block.ms...)."""

    code = ErrorCode.REQUEST_TIMED_OUT
    retriable = True


class NoBrokersAvailable(ClientError):
    """None of the bootstrap servers answered."""

    code = ErrorCode.NETWORK_EXCEPTION
    retriable = False


class UnknownTopicError(ClientError):
    """The topic does not exist (after waiting for metadata to show it)."""

    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    retriable = False


class Retry(enum.Enum):
    NO = "no"                       # give up: the caller's error
    RETRY = "retry"                 # try again after backoff
    REFRESH_AND_RETRY = "refresh"   # refresh metadata (leaders, coordinators) then retry


def classify(exc_or_code) -> Retry:
    """What a retry loop should do about an error code or exception."""
    if isinstance(exc_or_code, int):
        if exc_or_code == 0:
            return Retry.NO
        try:
            code = ErrorCode(exc_or_code)
        except ValueError:
            return Retry.NO
        if code.invalid_metadata or code in (ErrorCode.NOT_COORDINATOR,
                                              ErrorCode.COORDINATOR_NOT_AVAILABLE):
            return Retry.REFRESH_AND_RETRY
        return Retry.RETRY if code.retriable else Retry.NO
    exc = exc_or_code
    if isinstance(exc, (ConnectionClosed, OSError)):
        return Retry.REFRESH_AND_RETRY
    if isinstance(exc, trio.TooSlowError):
        return Retry.RETRY
    if isinstance(exc, KafkaError):
        if not exc.retriable:
            return Retry.NO
        if exc.invalid_metadata or exc.code in (ErrorCode.NOT_COORDINATOR,
                                                ErrorCode.COORDINATOR_NOT_AVAILABLE):
            return Retry.REFRESH_AND_RETRY
        return Retry.RETRY
    return Retry.NO


def is_retriable(exc_or_code) -> bool:
    return classify(exc_or_code) is not Retry.NO


def raise_for_code(code: int, message: str | None = None) -> None:
    """Raise the typed error for a non-zero Kafka error code."""
    if code:
        raise error_for_code(code)(message or None, code)


def check(code: int, message: str | None = None, what: str = "") -> None:
    """`raise_for_code` with context: `what` ("topic x") is prefixed to the broker's message."""
    if code:
        try:
            name = ErrorCode(code).name
        except ValueError:
            name = f"error {code}"
        text = message or (ErrorCode(code).message if code in ErrorCode._value2member_map_ else "")
        detail = f"{name}: {text}" if text else name
        raise error_for_code(code)(f"{what}: {detail}" if what else detail, code)


def error(code: int, message: str | None = None, what: str = "") -> KafkaError:
    """The typed error for `code`, its text led by the code's name (what users grep for)."""
    try:
        check(code, message, what)
    except KafkaError as exc:
        return exc
    return KafkaError(f"{what}: no error" if what else "no error", 0)
