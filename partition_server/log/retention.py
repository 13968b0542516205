"""Retention by time and size (`retention.ms`, `retention.bytes`), Kafka's rules:

- only whole closed segments are deleted, oldest first; the active segment never is;
- by time: a segment goes when its largest record timestamp is older than `retention.ms`
  (a segment without timestamps is kept);
- by size: oldest segments go while the log minus that segment is still ≥ `retention.bytes`;
- `-1` disables either rule; with `cleanup.policy` lacking `delete`, neither applies.
The log then advances its start offset to the first remaining segment's base offset.
"""

from __future__ import annotations


def segments_past_retention(segments, config, now_ms: int) -> int:
    """How many leading segments retention deletes now (never the last, active one)."""
    if "delete" not in config.cleanup_policy:
        return 0
    total = sum(s.size for s in segments)
    n = 0
    while n < len(segments) - 1:
        seg = segments[n]
        by_time = (config.retention_ms >= 0 and seg.max_timestamp >= 0
                   and now_ms - seg.max_timestamp > config.retention_ms)
        by_size = config.retention_bytes >= 0 and total - seg.size >= config.retention_bytes
        if not (by_time or by_size):
            break
        total -= seg.size
        n += 1
    return n
