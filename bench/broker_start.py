"""Broker start with many partitions (issue 17 B), two code trees side by side on the same data.

One data directory is built once: 3 controllers + 1 broker (RF 1, the `rf1` layout of
partitions.py), `--partitions` partitions in topics of 100, `--records` small records produced
to each, then the broker is stopped cleanly (SIGTERM). Then, alternating between the trees given
with `--tree` (the controllers keep running from this tree), the broker is started on that data
and timed until it prints `unfenced` and until Metadata shows it leading every partition; it is
then stopped cleanly again (timed too), so every start follows a clean stop by the same tree.

    git worktree add /tmp/old <base commit>        # then copy its C extension in, or build it
    python3 bench/broker_start.py --partitions 10000 --tree /tmp/old --tree . --rounds 2
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from clients.cli.dev import (CONTROLLER_IDS, DevLayout, ManagedProcess,  # noqa: E402
                             wait_ready, write_properties)
from bench.code_tree import started_from  # noqa: E402
from partition_server.testing import free_base_port  # noqa: E402

PER_TOPIC = 100
RF1 = {"default.replication.factor": "1", "min.insync.replicas": "1",
       "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
       "transaction.state.log.min.isr": "1"}


def start_broker(layout: DevLayout, tree: str) -> ManagedProcess:
    """The broker from `tree`: its directory first on the path (`-m` puts the cwd first)."""
    path = layout.data_dir / "configs" / "broker-0.properties"
    write_properties(path, layout.broker_properties(0))
    with started_from(tree):
        return ManagedProcess("broker-0", [sys.executable, "-m", "partition_server", "--config",
                                           str(path)], "unfenced", True, layout.log_path("broker-0"))


def all_led(bootstrap: str, topics: list[str], deadline: float) -> bool:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(timeout=10)
            if all(t in md.topics and md.topics[t].partitions and
                   all(p.leader == 0 for p in md.topics[t].partitions.values()) for t in topics):
                return True
        except Exception:                                   # noqa: BLE001
            pass
        time.sleep(0.2)
    return False


def stop(p: ManagedProcess, timeout_s: float) -> float:
    t = time.monotonic()
    p.proc.send_signal(signal.SIGTERM)
    try:
        p.proc.wait(timeout_s)
    except Exception:                                       # noqa: BLE001
        p.proc.kill()
        p.proc.wait()
        return float("nan")
    return time.monotonic() - t


def build(layout: DevLayout, tree: str, partitions: int, records: int) -> list[str]:
    topics = [f"s{i}" for i in range(partitions // PER_TOPIC)]
    broker = start_broker(layout, tree)
    assert wait_ready([broker], 120) is None, "broker did not start"
    bootstrap = f"127.0.0.1:{layout.broker_port(0)}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for i in range(0, len(topics), 20):
        todo = topics[i:i + 20]
        deadline = time.monotonic() + 300
        while todo:          # an old broker busy opening logs may be fenced for a moment
            futures = admin.create_topics([NewTopic(t, PER_TOPIC, 1) for t in todo],
                                          request_timeout=120)
            for t, f in futures.items():
                try:
                    f.result(300)
                    todo.remove(t)
                except Exception as exc:                    # noqa: BLE001
                    if "TOPIC_ALREADY_EXISTS" in str(exc):
                        todo.remove(t)
                    elif time.monotonic() > deadline:
                        raise
            time.sleep(1 if todo else 0)
    assert all_led(bootstrap, topics, time.monotonic() + 300), "partitions never led"
    if records:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "acks": "1"})
        for t in topics:
            for part in range(PER_TOPIC):
                for _ in range(records):
                    p.produce(t, b"x" * 100, partition=part)
            p.poll(0)
        assert p.flush(300) == 0, "records not delivered"
    print(f"built: {partitions} partitions, {records} record(s) each; "
          f"stop {stop(broker, 300):.1f}s", flush=True)
    return topics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=10000)
    ap.add_argument("--records", type=int, default=1)
    ap.add_argument("--tree", action="append", required=True, help="a code tree (repeat)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    trees = [os.path.abspath(t) for t in args.tree]
    data = Path(args.data_dir or tempfile.mkdtemp(prefix="broker-start-"))
    layout = DevLayout(data, free_base_port(), RF1)
    controllers = []
    for i, cid in enumerate(CONTROLLER_IDS):
        path = data / "configs" / f"controller-{cid}.properties"
        write_properties(path, layout.controller_properties(i))
        controllers.append(ManagedProcess(
            f"controller-{cid}", [sys.executable, "-m", "metadata_quorum", "--config", str(path)],
            "listening on", True, layout.log_path(f"controller-{cid}")))
    results: dict[str, list] = {t: [] for t in trees}
    try:
        assert wait_ready(controllers, 60) is None, "controllers did not start"
        topics = build(layout, trees[-1], args.partitions, args.records)
        bootstrap = f"127.0.0.1:{layout.broker_port(0)}"
        for r in range(args.rounds):
            order = trees if r % 2 == 0 else trees[::-1]
            for tree in order:
                for warm in (True, False):       # each timed start follows a stop by its tree
                    t0 = time.monotonic()
                    broker = start_broker(layout, tree)
                    problem = wait_ready([broker], 600)
                    unfenced = time.monotonic() - t0
                    led = all_led(bootstrap, topics, t0 + 600)
                    ready = time.monotonic() - t0
                    stop_s = stop(broker, 300)
                    if problem or not led:
                        print(f"{tree}: FAILED ({problem or 'not every partition led'})", flush=True)
                        continue
                    if not warm:
                        results[tree].append((unfenced, ready, stop_s))
                        print(f"{tree}: unfenced {unfenced:.2f}s, all led {ready:.2f}s, "
                              f"stop {stop_s:.2f}s (load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        for p in controllers:
            p.stop(30)
    print("\ntree | unfenced s (median) | all led s (median) | stop s (median) | runs")
    for tree, rows in results.items():
        if rows:
            med = [statistics.median(x[i] for x in rows) for i in range(3)]
            print(f"{tree} | {med[0]:.2f} | {med[1]:.2f} | {med[2]:.2f} | {len(rows)}")


if __name__ == "__main__":
    main()
