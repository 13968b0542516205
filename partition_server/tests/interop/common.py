"""Shared plan and checks for the interoperability scripts.

Each `check_<client>.py` script runs as its own process (so kafka-python 2.0.2 can run from a
separate virtualenv) and does the same sequence against a live cluster: create a topic, produce
with every codec, read everything back by assigned partitions, list offsets, describe configs,
delete the topic. It prints one JSON line with what it observed and exits non-zero on the first
mismatch, with a message saying which step failed.
"""

from __future__ import annotations

import json
import sys
import time

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 3
PER_CODEC = 12
BASE_TS = 1_700_000_000_000   # fixed, in the past: by-timestamp lookups have known answers


def plan():
    """The records to send: (codec, partition, key, value, headers, timestamp_ms)."""
    out = []
    for c, codec in enumerate(CODECS):
        for i in range(PER_CODEC):
            n = c * PER_CODEC + i
            out.append((codec, n % PARTITIONS, f"key-{n}".encode(), f"value-{n}-{codec}".encode() * 3,
                        [("h1", f"hv-{n}".encode()), ("h2", b"" if n % 5 == 0 else b"x")],
                        BASE_TS + n * 1000))
    return out


def expected_by_partition():
    parts: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    for codec, p, k, v, h, ts in plan():
        parts[p].append((k, v, h, ts))
    return parts


def compare(partition: int, got: list, expected: list) -> None:
    """got/expected: lists of (key, value, headers, timestamp) in offset order."""
    if len(got) != len(expected):
        fail(f"partition {partition}: read {len(got)} records, expected {len(expected)}")
    for i, (g, e) in enumerate(zip(got, expected)):
        gk, gv, gh, gts = g
        ek, ev, eh, ets = e
        if (gk, gv, gts) != (ek, ev, ets):
            fail(f"partition {partition} offset {i}: got {(gk, gv, gts)!r}, expected {(ek, ev, ets)!r}")
        if [(a, b) for a, b in gh] != [(a, b) for a, b in eh]:
            fail(f"partition {partition} offset {i}: headers {gh!r} != {eh!r}")


def fail(message: str) -> None:
    print(json.dumps({"ok": False, "error": message}), flush=True)
    sys.exit(1)


def done(**observed) -> None:
    print(json.dumps({"ok": True, **observed}), flush=True)
    sys.exit(0)


def deadline(seconds: float):
    end = time.monotonic() + seconds
    return lambda: time.monotonic() > end
