"""Crash tests with real processes: a child appends (and, in the second test, compacts) in a loop
and is SIGKILLed at random moments.

After every kill the reopened log must be a prefix of what was appended (record at offset n holds
value n), contain every batch the child reported as fsynced, have usable indexes (every offset
readable), and accept new appends. Seeded: RAFTKA_SEED=<n> replays; RAFTKA_SOAK=1 runs 500 rounds.
"""

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

from partition_server.log import LogConfig, PartitionLog
from wire.records.batch import build_batch, decode_batch, iter_batches

CHILD = textwrap.dedent("""
    import os, sys
    from partition_server.log import LogConfig, PartitionLog
    from wire.records.batch import build_batch
    directory, fsync_every = sys.argv[1], sys.argv[2] == "1"
    cfg = LogConfig(segment_bytes=20_000, index_interval_bytes=512,
                    flush_messages=1 if fsync_every else 2**63 - 1)
    plog = PartitionLog(directory, cfg)
    out = os.fdopen(1, "w", buffering=1)
    out.write("ready %d\\n" % plog.log_end_offset)
    n = plog.log_end_offset
    while True:
        k = 1 + n % 4
        recs = [(None, str(n + i).encode(), [], 1_700_000_000_000 + n + i) for i in range(k)]
        plog.append_as_leader(build_batch(recs), 1, 0)
        n += k
        if fsync_every:
            out.write("durable %d\\n" % n)
""")


def check_indexes(plog, from_offset: int = 0) -> None:
    """Every offset-index entry points at the start of the batch with its offset; time-index
    entries name a batch of the segment carrying that max timestamp."""
    for seg in plog.segments:
        if seg.next_offset < from_offset:
            continue
        starts = {h.pos: h for h in seg.iter_headers(0)}
        for off, pos in zip(seg.index.offsets, seg.index.positions):
            assert pos in starts and starts[pos].base_offset == off, (seg.path, off, pos)
        by_offset = {h.base_offset: h for h in starts.values()}
        for ts, off in zip(seg.time_index.timestamps, seg.time_index.offsets):
            assert off in by_offset and by_offset[off].max_timestamp == ts, (seg.path, ts, off)
        # an empty segment never indexed has no index file (not rebuilt at every open)
        size = os.path.getsize(seg.index.path) if os.path.exists(seg.index.path) else 0
        assert size == 8 * seg.index.entries


def check_log(directory: str, checked_below: int = 0) -> int:
    """Verify the reopened log from `checked_below` (earlier offsets were verified in a previous
    round and then closed cleanly; losing any of them shows up as a log end offset below it)."""
    plog = PartitionLog(directory, LogConfig(segment_bytes=20_000, index_interval_bytes=512))
    assert plog.log_end_offset >= checked_below
    check_indexes(plog, checked_below)
    offset = max(plog.log_start_offset, checked_below)
    while offset < plog.log_end_offset:
        data = plog.read(offset, 4096).read_bytes()
        for h in iter_batches(data):
            assert h.is_valid()
            for r in decode_batch(h.bytes()).records:
                if r.offset >= offset:
                    assert r.value == str(r.offset).encode(), (r.offset, r.value)
            offset = h.next_offset
    leo = plog.log_end_offset
    info = plog.append_as_leader(build_batch([(None, str(leo).encode(), [], 0)]), 1, 0)
    assert info.first_offset == leo
    plog.close()
    return leo + 1


def run_rounds(tmp_path, rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    directory = str(tmp_path / "crash-0")
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    durable = verified = 0
    for rnd in range(rounds):
        fsync_every = rng.random() < 0.5
        child = subprocess.Popen([sys.executable, "-c", CHILD, directory, "1" if fsync_every else "0"],
                                 stdout=subprocess.PIPE, text=True, env=env)
        assert child.stdout.readline().startswith("ready"), f"seed {seed} round {rnd}"
        time.sleep(rng.uniform(0.0, 0.15))
        child.send_signal(signal.SIGKILL)
        reported = child.stdout.read().split()
        child.wait()
        marks = [int(x) for x in reported if x.isdigit()]
        if marks:
            durable = max(durable, marks[-1])
        end = check_log(directory, verified)
        assert end - 1 >= durable, f"seed {seed} round {rnd}: lost fsynced data ({end - 1} < {durable})"
        durable = verified = end     # check_log appended and closed cleanly


def test_sigkill_rounds(tmp_path):
    seed = int(os.environ.get("RAFTKA_SEED", "1234"))
    rounds = 500 if os.environ.get("RAFTKA_SOAK") == "1" else 50
    run_rounds(tmp_path, rounds, seed)


COMPACT_CHILD = textwrap.dedent("""
    import os, sys
    from partition_server.log import LogCleaner, LogConfig, PartitionLog
    from wire.records.batch import build_batch
    cfg = LogConfig(segment_bytes=3000, index_interval_bytes=256, cleanup_policy=("compact",),
                    min_cleanable_dirty_ratio=0.0)
    plog = PartitionLog(sys.argv[1], cfg)
    cleaner = LogCleaner(plog, dedupe_buffer_bytes=150 * 40)
    out = os.fdopen(1, "w", buffering=1)
    out.write("ready\\n")
    n = plog.log_end_offset
    while True:
        recs = [(b"k%d" % ((n + i) % 7), str(n + i).encode(), [], n + i) for i in range(3)]
        plog.append_as_leader(build_batch(recs), 1, 0)
        n += 3
        cleaner.clean_step(1500, 0)
""")


def check_compacted_log(directory: str) -> tuple[int, int]:
    cfg = LogConfig(segment_bytes=3000, index_interval_bytes=256, cleanup_policy=("compact",))
    plog = PartitionLog(directory, cfg)
    check_indexes(plog)
    assert not [n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap"))]
    present, offset = {}, plog.log_start_offset
    while offset < plog.log_end_offset:
        info = plog.read(offset, 4096)
        for h in iter_batches(info.read_bytes()):
            assert h.is_valid()
            for r in decode_batch(h.bytes()).records:
                assert r.value == str(r.offset).encode() and r.key == b"k%d" % (r.offset % 7)
                assert r.offset not in present
                present[r.offset] = r.key
        offset = info.next_offset
    leo = plog.log_end_offset
    for k in range(7):                        # the latest record of every key survives
        last = max((o for o in range(max(0, leo - 7), leo) if o % 7 == k), default=None)
        if last is not None:
            assert last in present, (k, last, leo)
    plog.close()
    return len(present), leo


def test_sigkill_during_compaction(tmp_path):
    seed = int(os.environ.get("RAFTKA_SEED", "99"))
    rng = random.Random(seed)
    rounds = 200 if os.environ.get("RAFTKA_SOAK") == "1" else 15
    directory = str(tmp_path / "compact-0")
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for rnd in range(rounds):
        child = subprocess.Popen([sys.executable, "-c", COMPACT_CHILD, directory],
                                 stdout=subprocess.PIPE, text=True, env=env)
        assert child.stdout.readline().startswith("ready"), f"seed {seed} round {rnd}"
        time.sleep(rng.uniform(0.02, 0.2))
        child.send_signal(signal.SIGKILL)
        child.communicate()
        kept, leo = check_compacted_log(directory)
    if rounds <= 15:
        assert kept < leo / 2, "the cleaner should have removed most superseded records"
    else:
        # Known limit, not a safety failure: over hundreds of rounds the log grows to thousands
        # of tiny segments (no merging) and a kill loses the pass in progress, so the cleaner
        # falls behind the appender; the per-round invariants above still hold.
        print(f"soak: {kept} of {leo} records kept")
