"""Pure controller throughput: commands/s and replay records/s for create_topics and broker
heartbeats (no Raft, no I/O). Usage: python3 bench/metadata_controller.py [topics] [brokers]"""

import os
import sys
import time

# run as a script, sys.path[0] is bench/, whose metadata_quorum.py would shadow the package
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [_ROOT] + [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

from metadata_quorum import records as r  # noqa: E402
from metadata_quorum.controller.quorum_controller import QuorumController  # noqa: E402


def main(topics: int = 2000, brokers: int = 6) -> None:
    c = QuorumController(default_replication_factor=3)
    offset = 0

    def replay(records):
        nonlocal offset
        for rec in records:
            c.replay(offset, r.decode_record(r.encode_record(rec)))
            offset += 1

    for b in range(brokers):
        recs, res = c.register_broker(b, f"i{b}", "127.0.0.1", 9092 + b, f"r{b % 3}", 0)
        replay(recs)
        replay(c.broker_heartbeat(b, res.broker_epoch, offset, False, False, 0)[0])

    cmd_time = replay_time = 0.0
    replayed = 0
    for i in range(topics):
        t0 = time.perf_counter()
        recs, _ = c.create_topics([{"name": f"topic-{i}", "num_partitions": 5,
                                    "replication_factor": 3}])
        t1 = time.perf_counter()
        replay(recs)
        cmd_time += t1 - t0
        replay_time += time.perf_counter() - t1
        replayed += len(recs)
    parts = topics * 5
    print(f"create_topics ({parts} partitions total): {topics / cmd_time:,.0f} commands/s, "
          f"replay {replayed / replay_time:,.0f} records/s (encode+decode+apply)")

    epochs = {b: c.image.brokers[b].broker_epoch for b in range(brokers)}
    n = 20000
    t0 = time.perf_counter()
    for i in range(n):
        b = i % brokers
        c.broker_heartbeat(b, epochs[b], offset, False, False, 1 + i)
    dt = time.perf_counter() - t0
    print(f"broker_heartbeat (steady state, {parts} partitions): {n / dt:,.0f} commands/s")

    t0 = time.perf_counter()
    recs = c.tick(10**9)          # every session lapses: fence all, move all leaderships
    dt_tick = time.perf_counter() - t0
    t0 = time.perf_counter()
    replay(recs)
    print(f"tick fencing {brokers} brokers: {len(recs)} records computed in {dt_tick * 1e3:.0f} ms, "
          f"replayed at {len(recs) / (time.perf_counter() - t0):,.0f} records/s")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
