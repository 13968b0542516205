"""Two clocks, for two jobs (fault F15: a clock jump on one node).

- `wall_ms()`: the wall clock, for what is stored or shown as a time of day — record
  timestamps, LogAppendTime, retention by timestamp, a transaction's start time (the next
  coordinator reads it after a failover).
- `steady_ms()`: for deadlines inside one process — broker sessions on the controller, a
  follower's last caught-up time (ISR lag), group member sessions, fetch sessions. It reads the
  wall clock once at start and then moves with the monotonic clock, so it stays near the time
  of day (its values may be logged or kept in group metadata) but never jumps: an NTP step or an
  operator's `date -s` an hour back must not keep a dead broker "alive" for an hour, and an hour
  forward must not fence every broker at once. Kafka does the same with System.nanoTime for
  broker heartbeats and its timer wheels.

`install_offset_file(path)` is a test seam (`raftka.clock.offset.file`): it shifts this
process's `time.time` by the number of seconds written in that file (re-read every 100 ms), the
way a real clock jump would, so live tests can jump one node's clock.
"""

from __future__ import annotations

import threading
import time

_MONO0 = time.monotonic()
_WALL0 = time.time()


def wall_ms() -> int:
    return int(time.time() * 1000)


def steady_ms() -> int:
    return int((_WALL0 + time.monotonic() - _MONO0) * 1000)


def install_offset_file(path: str, poll_s: float = 0.1) -> None:
    real_time, real_time_ns = time.time, time.time_ns
    offset = [0.0]

    def read() -> None:
        try:
            with open(path) as f:
                offset[0] = float(f.read().strip() or 0)
        except (OSError, ValueError):
            offset[0] = 0.0

    def poll() -> None:
        while True:
            read()
            time.sleep(poll_s)

    read()
    time.time = lambda: real_time() + offset[0]
    time.time_ns = lambda: real_time_ns() + int(offset[0] * 1e9)
    threading.Thread(target=poll, daemon=True, name="clock-offset").start()
