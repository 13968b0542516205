"""What a log append and a log read return (partition_log.py)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int            # -1 unless message.timestamp.type=LogAppendTime
    batches: int
    records: int
    # a follower's append: the batches' headers, parsed once by the validation (the fetcher
    # reads the producer state from them)
    headers: list | None = dataclasses.field(default=None, repr=False)


@dataclasses.dataclass
class FetchDataInfo:
    ranges: list                    # FileRange chunks (at most one today)
    size: int
    first_offset: int
    next_offset: int = -1           # offset after the last batch returned (first_offset if none)

    def read_bytes(self) -> bytes:
        return b"".join(r.read() for r in self.ranges)
