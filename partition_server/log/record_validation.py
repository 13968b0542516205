"""Per-record checks of a client's batches against the topic's rules (Kafka's LogValidator,
KIP-467): a record that breaks one refuses its whole batch — nothing of it is appended — and the
Produce answer names each offending record by its index in the batch (`record_errors`).

    null key on a compacted topic   INVALID_RECORD   (cleanup.policy contains compact)
    CreateTime timestamp too old    INVALID_TIMESTAMP (now - ts > message.timestamp.before.max.ms)
    CreateTime timestamp too new    INVALID_TIMESTAMP (ts - now > message.timestamp.after.max.ms)

    batch marked LogAppendTime       INVALID_TIMESTAMP (only the broker stamps that; accepted on a
                                     CreateTime topic when its records carry timestamps, as Kafka)

Both limits fall back to the deprecated message.timestamp.difference.max.ms while left at their
default (Long.MAX_VALUE), as in Kafka 3.6-3.9; records without a timestamp (-1) and topics with
message.timestamp.type=LogAppendTime are not range-checked. The messages are Kafka's own, so
tools that match on them keep working.

Cost: nothing unless the topic is compacted, sets a limit or the batch claims LogAppendTime;
with only an `after` limit the batch header's max timestamp settles it; otherwise the batch is
decoded (C decoder).
"""

from __future__ import annotations

import os

from partition_server.log.config import NEVER, LogConfig
from wire.errors import DecodeError, ErrorCode, KafkaError
from wire.records.batch import TimestampType, decode_batch

NO_TIMESTAMP = -1


class RecordValidationError(KafkaError):
    """A batch refused for its records: `code` INVALID_RECORD or INVALID_TIMESTAMP, the
    message Kafka puts in the partition's error_message, and `record_errors`
    [(batch_index, message)] for ProduceResponse v8+."""

    def __init__(self, code: ErrorCode, message: str, record_errors: list[tuple[int, str]]):
        super().__init__(message, code)
        self.code = code
        self.record_errors = record_errors


def _long(n: int) -> int:
    """Java long arithmetic: Kafka's message shows `now + Long.MAX_VALUE` wrapped."""
    return (n + 2**63) % 2**64 - 2**63


def _limits(config: LogConfig) -> tuple[int, int] | None:
    if config.message_timestamp_type != "CreateTime":
        return None
    diff = config.message_timestamp_difference_max_ms
    before = config.message_timestamp_before_max_ms
    after = config.message_timestamp_after_max_ms
    before = diff if before == NEVER else before
    after = diff if after == NEVER else after
    return None if before == NEVER and after == NEVER else (before, after)


def validate_records(data, headers, config: LogConfig, log_dir: str, now_ms: int) -> None:
    """Raise RecordValidationError for the first batch of `headers` (in `data`) holding a
    record the topic refuses; control batches are the coordinators' and not checked here.
    `log_dir` names the partition (its basename, taken only for a message: this runs on every
    client append)."""
    compacted = "compact" in config.cleanup_policy
    limits = _limits(config)
    create_time = config.message_timestamp_type == "CreateTime"
    for h in headers:
        if h.is_control:
            continue
        stamped = h.timestamp_type == TimestampType.LOG_APPEND_TIME
        if not compacted and not stamped and (
                limits is None or limits[0] == NEVER and h.max_timestamp - now_ms <= limits[1]):
            continue            # no rule applies, or only a future limit the newest record meets
        errors = _record_errors(data, h, compacted, create_time, limits,
                                os.path.basename(log_dir), now_ms)
        if errors:
            raise _batch_error(errors)


def _record_errors(data, h, compacted: bool, create_time: bool, limits, topic_partition: str,
                   now_ms: int) -> list[tuple[ErrorCode, int, str]]:
    try:
        records = decode_batch(data, h.pos, verify_crc=False).records
    except DecodeError as exc:
        raise KafkaError.from_code(ErrorCode.CORRUPT_MESSAGE, f"invalid record batch: {exc}") \
            from None
    stamped = h.timestamp_type == TimestampType.LOG_APPEND_TIME
    errors = []
    for index, r in enumerate(records):
        if compacted and r.key is None:
            errors.append((ErrorCode.INVALID_RECORD, index, "Compacted topic cannot accept "
                           f"message without key in topic partition {topic_partition}"))
        elif create_time and r.timestamp != NO_TIMESTAMP:
            if limits is not None and (now_ms - r.timestamp > limits[0] or
                                       r.timestamp - now_ms > limits[1]):
                errors.append((ErrorCode.INVALID_TIMESTAMP, index,
                               f"Timestamp {r.timestamp} of message with offset {r.offset} is out "
                               f"of range. The timestamp should be within "
                               f"[{_long(now_ms - limits[0])}, {_long(now_ms + limits[1])}]"))
        elif stamped:
            errors.append((ErrorCode.INVALID_TIMESTAMP, index,
                           f"Invalid timestamp type in message DefaultRecord(offset={r.offset}, "
                           f"timestamp={r.timestamp}, key={len(r.key or b'')} bytes, "
                           f"value={len(r.value or b'')} bytes). Producer should not set "
                           "timestamp type to LogAppendTime."))
    return errors


def _batch_error(errors: list[tuple[ErrorCode, int, str]]) -> RecordValidationError:
    """Kafka's processRecordErrors: any timestamp error makes it INVALID_TIMESTAMP."""
    record_errors = [(index, message) for _code, index, message in errors]
    if any(code == ErrorCode.INVALID_TIMESTAMP for code, _i, _m in errors):
        return RecordValidationError(ErrorCode.INVALID_TIMESTAMP, "One or more records have "
                                     "been rejected due to invalid timestamp", record_errors)
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')"
                      for i, m in record_errors[:3])
    return RecordValidationError(
        ErrorCode.INVALID_RECORD, f"One or more records have been rejected due to "
        f"{len(record_errors)} record errors in total, and only showing the first three errors "
        f"at most: [{shown}]", record_errors)
