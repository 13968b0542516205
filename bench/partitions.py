"""Partition-scale benchmark (issue 17 item 4): what a cluster holding many partitions costs.

For each partition count (`--partitions 1000,10000,30000`, topics of 100 partitions each) and each
setup it starts a fresh cluster on 127.0.0.1 (the `raftka dev` layout, `clients/cli/dev.py`) and
measures, in this order:

- create: the topics, created through a broker in CreateTopics requests of `--topics-per-request`
  topics each (confluent-kafka's AdminClient sends one request per `create_topics` call), the
  time until every request returned and until Metadata shows a leader for every partition;
- idle: after `--settle-seconds`, each process's CPU over `--idle-seconds` (utime+stime from
  /proc/<pid>/stat, % of one core) and its RSS (VmRSS from /proc/<pid>/status);
- Metadata latency: `--metadata-requests` all-topic Metadata requests (confluent-kafka's
  `list_topics()`, so the figure includes building its Python objects), p50/p99;
- throughput: 100 B records, acks=all (librdkafka, linger 5 ms), produced round-robin over 1,000
  partitions (the first ten bench topics) and over one 6-partition topic, then read back with an
  assigned consumer; alternating, `--rounds` each, in the same run, reported as a ratio;
- broker restart: SIGTERM one broker (broker-1; broker-0 for rf1), start it again on the same
  data: time to `unfenced` and until it is back in the ISR of every partition it replicates,
  and how many times meanwhile the controllers fenced another (live) broker and the active
  controller changed (from the controllers' logs);
- active-controller SIGKILL: the active controller (DescribeQuorum to each controller) is killed;
  time until a CreateTopics of a new 1-partition topic succeeds through a broker (so through the
  next active controller); the killed controller is started again;
- full-cluster restart (last, because it may not come back): every process stopped as `raftka dev`
  stops on Ctrl-C (`stop_cluster`: SIGTERM brokers, then controllers; SIGKILL after 15 s), then
  started on the same data dir: time until every broker is unfenced and every partition led.

Setups: `rf3` is 3 controllers + 3 brokers, RF 3, min.insync.replicas 2; `rf1` is the same dev
layout with the 3 controllers and ONE broker (broker-0), RF 1, min.insync.replicas 1 (the one
difference from rf3 is replication and the broker count; the single-node combined config was not
used so that the controllers are the same processes in both).

A step that fails (a deadline passes, a process exits, a request errs) is recorded as a result
(`"error": "..."`) and the bench carries on with what can still be measured; every process is
killed at the end even on failure. Deadlines scale with the partition count.

    python3 bench/partitions.py                                    # 1,000 partitions, rf3 + rf1
    python3 bench/partitions.py --partitions 1000,3000 --out /tmp/partitions.json
    python3 bench/partitions.py --partitions 10000,30000 --setup rf3 --idle-seconds 60
    python3 bench/partitions.py --partitions 200 --idle-seconds 3 --records 20000   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trio  # noqa: E402
from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from clients.cli.dev import (BROKER_IDS, CONTROLLER_IDS, ManagedProcess,  # noqa: E402
                             start_cluster, stop_cluster, wait_ready, write_properties)
from clients.cli.quorum import describe as describe_quorum  # noqa: E402
from partition_server.testing import LiveCluster  # noqa: E402
from controller_logs import ControllerLogs  # noqa: E402
from partitions_throughput import StepFailed, Throughput  # noqa: E402

TOPIC_PARTITIONS = 100
THROUGHPUT_WIDE = 1000
THROUGHPUT_NARROW = 6
SETUPS = {
    "rf3": {"brokers": BROKER_IDS, "rf": 3, "min_isr": 2, "overrides": {}},
    "rf1": {"brokers": (0,), "rf": 1, "min_isr": 1, "overrides": {
        "default.replication.factor": "1", "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1"}},
}


def scaled(partitions: int, base_s: float, per_1k_s: float) -> float:
    """A deadline that grows with the partition count (30k partitions: base + 30 x per_1k)."""
    return base_s + per_1k_s * partitions / 1000


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def load_avg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


# -- the cluster ----------------------------------------------------------------------------------

class BenchCluster(LiveCluster):
    """`LiveCluster` (free ports, the dev layout, restart helpers) on a subset of the brokers."""

    def __init__(self, data_dir: Path, overrides: dict[str, str], broker_ids: tuple[int, ...]):
        super().__init__(data_dir, overrides)
        self.broker_ids = tuple(broker_ids)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.layout.broker_port(b)}" for b in self.broker_ids)

    def launch(self) -> None:
        """Start every process without waiting (the dev layout; rf1 starts broker-0 only)."""
        if self.broker_ids == tuple(BROKER_IDS):
            self.procs = start_cluster(self.layout, quiet=True)
            return
        all_procs = []
        config_dir = self.layout.data_dir / "configs"
        for i, cid in enumerate(CONTROLLER_IDS):
            path = config_dir / f"controller-{cid}.properties"
            write_properties(path, self.layout.controller_properties(i))
            all_procs.append(ManagedProcess(
                f"controller-{cid}",
                [sys.executable, "-m", "metadata_quorum", "--config", str(path)],
                "listening on", True, self.layout.log_path(f"controller-{cid}")))
        for bid in self.broker_ids:
            path = config_dir / f"broker-{bid}.properties"
            write_properties(path, self.layout.broker_properties(bid))
            all_procs.append(ManagedProcess(
                f"broker-{bid}", [sys.executable, "-m", "partition_server", "--config", str(path)],
                "unfenced", True, self.layout.log_path(f"broker-{bid}")))
        self.procs = all_procs

    def start_and_wait(self, timeout_s: float) -> None:
        self.launch()
        problem = wait_ready(self.procs, timeout_s)
        if problem:
            raise StepFailed(problem)

    def kill_all(self) -> None:
        for p in self.procs:
            if p.proc.poll() is None:
                p.proc.kill()
        for p in self.procs:
            try:
                p.proc.wait(10)
            except Exception:                           # noqa: BLE001
                pass

    def controller_addresses(self) -> dict[int, tuple[str, int]]:
        return {cid: ("127.0.0.1", self.layout.controller_port(i))
                for i, cid in enumerate(CONTROLLER_IDS)}


def active_controller(cluster: BenchCluster, timeout_s: float = 30) -> int:
    """The active controller's node id, as a majority of the live controllers report it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        seen = []
        for cid, (host, port) in cluster.controller_addresses().items():
            if cluster.proc(f"controller-{cid}").proc.poll() is not None:
                continue
            try:
                seen.append(trio.run(_describe_with_timeout, host, port))
            except Exception:                           # noqa: BLE001
                continue
        leaders = [s for s in seen if s in CONTROLLER_IDS]
        if leaders and leaders.count(leaders[0]) >= 2:
            return leaders[0]
        time.sleep(0.2)
    raise StepFailed(f"no active controller agreed on by two controllers within {timeout_s:.0f}s")


async def _describe_with_timeout(host: str, port: int) -> int:
    with trio.fail_after(5):
        return (await describe_quorum(host, port))["leader_id"]


def proc_cpu_s(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    # fields[0] is field 3 (state): utime is field 14, stime 15
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- metadata -------------------------------------------------------------------------------------

def topic_names(prefix: str, partitions: int) -> list[str]:
    topics = (partitions + TOPIC_PARTITIONS - 1) // TOPIC_PARTITIONS
    return [f"{prefix}-{i:05d}" for i in range(topics)]


def metadata_timeout(partitions: int) -> float:
    return scaled(partitions, 30, 2)


def metadata(bootstrap: str, timeout_s: float = 30):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.list_topics(timeout=timeout_s).topics


def unled(topics_meta, names: list[str], per_topic: int) -> int:
    missing = 0
    for name in names:
        t = topics_meta.get(name)
        if t is None or t.error is not None:
            missing += per_topic
            continue
        missing += per_topic - sum(1 for p in t.partitions.values() if p.leader >= 0)
    return missing


def wait_all_led(bootstrap: str, names: list[str], per_topic: int, timeout_s: float) -> float:
    """Seconds until Metadata shows a leader for every partition of `names`."""
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    left = None
    while time.monotonic() < deadline:
        try:
            left = unled(metadata(bootstrap, min(metadata_timeout(len(names) * per_topic),
                                                 timeout_s)), names, per_topic)
        except KafkaException as exc:
            left = f"Metadata failed: {exc}"
        if left == 0:
            return time.monotonic() - t0
        time.sleep(0.5)
    raise StepFailed(f"partitions without a leader after {timeout_s:.0f}s: {left}")


def create_topics(bootstrap: str, names: list[str], rf: int, min_isr: int, per_request: int,
                  partitions_total: int) -> dict:
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 120000})
    per_call_s = scaled(per_request * TOPIC_PARTITIONS, 60, 10)
    errors = []
    t0 = time.monotonic()
    for i in range(0, len(names), per_request):
        batch = [NewTopic(n, TOPIC_PARTITIONS, rf, config={"min.insync.replicas": str(min_isr)})
                 for n in names[i:i + per_request]]
        futures = admin.create_topics(batch, operation_timeout=per_call_s,
                                      request_timeout=per_call_s)
        for name, fut in futures.items():
            try:
                fut.result(per_call_s + 10)
            except Exception as exc:                    # noqa: BLE001
                errors.append(f"{name}: {exc}")
    created_s = time.monotonic() - t0
    result = {"create_s": round(created_s, 2),
              "requests": (len(names) + per_request - 1) // per_request}
    if errors:
        result["create_errors"] = errors[:5] + [f"{len(errors)} in all"]
    try:
        wait_all_led(bootstrap, names, TOPIC_PARTITIONS, scaled(partitions_total, 60, 20))
        result["all_led_s"] = round(time.monotonic() - t0, 2)
    except StepFailed as exc:
        result["error"] = str(exc)
    return result


# -- measurements ---------------------------------------------------------------------------------

def idle_usage(cluster: BenchCluster, settle_s: float, idle_s: float) -> dict:
    time.sleep(settle_s)
    pids = {p.name: p.proc.pid for p in cluster.procs if p.proc.poll() is None}
    before = {n: proc_cpu_s(pid) for n, pid in pids.items()}
    t0 = time.monotonic()
    time.sleep(idle_s)
    elapsed = time.monotonic() - t0
    out = {}
    for n, pid in pids.items():
        try:
            out[n] = {"cpu_pct": round(100 * (proc_cpu_s(pid) - before[n]) / elapsed, 1),
                      "rss_mib": round(proc_rss_mib(pid), 1)}
        except OSError:
            out[n] = {"error": "exited during the idle window"}
    return out


def metadata_latency(bootstrap: str, names: list[str], requests: int, partitions: int) -> dict:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    timeout_s = metadata_timeout(partitions)
    admin.list_topics(timeout=timeout_s)                # connect + warm up
    times = []
    for _ in range(requests):
        t0 = time.perf_counter()
        topics = admin.list_topics(timeout=timeout_s).topics
        times.append(time.perf_counter() - t0)
    seen = sum(1 for n in names if n in topics)
    return {"metadata_p50_ms": round(1000 * pct(times, 0.5), 1),
            "metadata_p99_ms": round(1000 * pct(times, 0.99), 1),
            "metadata_requests": requests, "topics_seen": seen}


def throughput(cluster: BenchCluster, wide_names: list[str], setup: dict, records: int,
               rounds: int, partitions: int) -> dict:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    narrow = "bench-narrow"
    for fut in admin.create_topics([NewTopic(narrow, THROUGHPUT_NARROW, setup["rf"], config={
            "min.insync.replicas": str(setup["min_isr"])})], operation_timeout=60).values():
        fut.result(70)
    wait_all_led(cluster.bootstrap, [narrow], THROUGHPUT_NARROW, 60)
    wide_tps = [(t, q) for t in wide_names for q in range(TOPIC_PARTITIONS)][:THROUGHPUT_WIDE]
    narrow_tps = [(narrow, q) for q in range(THROUGHPUT_NARROW)]
    runs = {"narrow": Throughput(cluster.bootstrap, narrow_tps),
            "wide": Throughput(cluster.bootstrap, wide_tps)}
    got = {"narrow": [], "wide": []}
    timeout_s = scaled(partitions, 300, 10)
    for _ in range(rounds):
        for name in ("narrow", "wide"):
            got[name].append(runs[name].round(records, timeout_s))
    out = {"wide_partitions": len(wide_tps), "narrow_partitions": THROUGHPUT_NARROW,
           "records": records, "rounds": rounds}
    for name in got:
        for k in ("produce_rps", "consume_rps"):
            out[f"{name}_{k}"] = round(statistics.median(r[k] for r in got[name]))
    for k in ("produce_rps", "consume_rps"):
        out[f"{k}_ratio_wide_to_narrow"] = round(out[f"wide_{k}"] / out[f"narrow_{k}"], 3)
    return out


def replicas_of(bootstrap: str, names: list[str], broker_id: int) -> list[tuple[str, int]]:
    topics = metadata(bootstrap, metadata_timeout(len(names) * TOPIC_PARTITIONS))
    return [(n, pid) for n in names if n in topics
            for pid, p in topics[n].partitions.items() if broker_id in p.replicas]


def broker_restart(cluster: BenchCluster, names: list[str], partitions: int) -> dict:
    broker = 1 if 1 in cluster.broker_ids else cluster.broker_ids[0]
    name = f"broker-{broker}"
    mine = replicas_of(cluster.bootstrap, names, broker)
    if not mine:
        raise StepFailed(f"Metadata shows no replica on broker {broker}")
    out = {"broker": broker, "replicas": len(mine)}
    logs = ControllerLogs(cluster)
    try:
        return _broker_restart(cluster, broker, name, mine, partitions, out)
    finally:
        out.update(logs.counts(broker))


def _broker_restart(cluster: BenchCluster, broker: int, name: str, mine, partitions: int,
                    out: dict) -> dict:
    t0 = time.monotonic()
    cluster.proc(name).stop(timeout=scaled(partitions, 30, 5))
    out["stop_s"] = round(time.monotonic() - t0, 2)
    out["exit_code"] = cluster.proc(name).proc.returncode
    t1 = time.monotonic()
    try:
        cluster.restart_broker(broker, timeout_s=scaled(partitions, 60, 20))
    except RuntimeError as exc:
        out["error"] = f"restart: {exc}"
        return out
    out["unfenced_s"] = round(time.monotonic() - t1, 2)
    deadline = t1 + scaled(partitions, 60, 30)
    wanted = set(mine)
    outside = None
    while time.monotonic() < deadline:
        try:
            topics = metadata(cluster.bootstrap, metadata_timeout(partitions))
            outside = [(t, q) for t, q in wanted
                       if t not in topics or q not in topics[t].partitions
                       or broker not in topics[t].partitions[q].isrs
                       or topics[t].partitions[q].leader < 0]
        except KafkaException as exc:
            outside = f"Metadata failed: {exc}"
        if outside == []:
            out["in_every_isr_s"] = round(time.monotonic() - t1, 2)
            return out
        time.sleep(0.5)
    n = len(outside) if isinstance(outside, list) else outside
    out["error"] = f"broker {broker} still outside the ISR (or unled) of {n} partitions"
    return out


def controller_failover(cluster: BenchCluster, setup: dict, kills: int, partitions: int) -> dict:
    times, victims, errors = [], [], []
    deadline_s = scaled(partitions, 60, 2)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for k in range(kills):
        try:
            victim = active_controller(cluster)
        except StepFailed as exc:
            errors.append(str(exc))
            break
        index = CONTROLLER_IDS.index(victim)
        cluster.kill(f"controller-{victim}", signal.SIGKILL)
        t0 = time.monotonic()
        topic = f"bench-failover-{k}"
        done, last = None, None
        while time.monotonic() - t0 < deadline_s:
            fut = admin.create_topics([NewTopic(topic, 1, setup["rf"])], operation_timeout=10,
                                      request_timeout=10)[topic]
            try:
                fut.result(15)
                done = time.monotonic() - t0
            except Exception as exc:                    # noqa: BLE001 - retried until the deadline
                last = exc.args[0] if isinstance(exc, KafkaException) else exc
                if isinstance(exc, KafkaException) and last.name() == "TOPIC_ALREADY_EXISTS":
                    done = time.monotonic() - t0            # an earlier, timed-out try committed
            if done is not None:
                break
            time.sleep(0.05)
        if done is None:
            errors.append(f"kill {k}: no CreateTopics committed within {deadline_s:.0f}s after "
                          f"SIGKILL of controller {victim} (last error: {last})")
        else:
            times.append(done)
        victims.append(victim)
        try:
            cluster.restart_controller(index, timeout_s=scaled(partitions, 60, 2))
        except RuntimeError as exc:
            errors.append(f"restarting controller {victim}: {exc}")
            break
    out = {"killed": victims, "first_commit_s": [round(t, 2) for t in times]}
    if times:
        out["first_commit_median_s"] = round(statistics.median(times), 2)
    if errors:
        out["error"] = "; ".join(errors)
    return out


def full_restart(cluster: BenchCluster, names: list[str], partitions: int) -> dict:
    t0 = time.monotonic()
    stop_cluster(cluster.procs)
    out = {"stop_s": round(time.monotonic() - t0, 2),
           "exit_codes": {p.name: p.proc.returncode for p in cluster.procs}}
    killed = [n for n, c in out["exit_codes"].items() if c not in (0, None)]
    if killed:
        out["not_clean"] = killed
    t1 = time.monotonic()
    try:
        cluster.start_and_wait(scaled(partitions, 60, 30))
        out["all_unfenced_s"] = round(time.monotonic() - t1, 2)
        wait_all_led(cluster.bootstrap, names, TOPIC_PARTITIONS,
                     max(10, scaled(partitions, 60, 30) - (time.monotonic() - t1)))
        out["ready_s"] = round(time.monotonic() - t1, 2)
    except StepFailed as exc:
        out["error"] = str(exc)
        dead = {p.name: p.proc.returncode for p in cluster.procs if p.proc.poll() is not None}
        if dead:
            out["exited"] = dead
        out["log_tails"] = {p.name: _log_tail(cluster, p.name) for p in cluster.procs
                            if p.name in dead or not p.ready.is_set()}
    return out


def _log_tail(cluster: BenchCluster, name: str, lines: int = 8) -> list[str]:
    try:
        return cluster.layout.log_path(name).read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


# -- one run --------------------------------------------------------------------------------------

def step(result: dict, key: str, fn, *args) -> None:
    """Run one measurement; any failure becomes the step's result and the bench goes on."""
    t0 = time.monotonic()
    print(f"  {key} ...", file=sys.stderr, flush=True)
    try:
        result[key] = fn(*args)
    except Exception as exc:                            # noqa: BLE001 - a failure is a result
        result[key] = {"error": f"{type(exc).__name__}: {exc}"}
    print(f"  {key}: {json.dumps(result[key])[:400]} ({time.monotonic() - t0:.1f}s)",
          file=sys.stderr, flush=True)


def run_one(setup_name: str, partitions: int, args, workdir: Path) -> dict:
    setup = SETUPS[setup_name]
    result = {"setup": setup_name, "partitions": partitions, "load_before": load_avg(),
              "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    data_dir = workdir / f"{setup_name}-{partitions}"
    cluster = BenchCluster(data_dir, setup["overrides"], setup["brokers"])
    names = topic_names("bench", partitions)
    print(f"[{setup_name} {partitions}] data {data_dir}, load {result['load_before']}",
          file=sys.stderr, flush=True)
    try:
        try:
            cluster.start_and_wait(120)
        except StepFailed as exc:
            result["error"] = f"cluster did not start: {exc}"
            return result
        step(result, "create", create_topics, cluster.bootstrap, names, setup["rf"],
             setup["min_isr"], args.topics_per_request, partitions)
        if "error" in result["create"] and "all_led_s" not in result["create"]:
            return result
        step(result, "idle", idle_usage, cluster, args.settle_seconds, args.idle_seconds)
        step(result, "metadata", metadata_latency, cluster.bootstrap, names,
             args.metadata_requests, partitions)
        if args.records > 0:
            step(result, "throughput", throughput, cluster, names, setup, args.records,
                 args.rounds, partitions)
        step(result, "broker_restart", broker_restart, cluster, names, partitions)
        step(result, "controller_failover", controller_failover, cluster, setup,
             args.controller_kills, partitions)
        step(result, "full_restart", full_restart, cluster, names, partitions)
    finally:
        try:
            stop_cluster(cluster.procs)
        finally:
            cluster.kill_all()
        result["load_after"] = load_avg()
    return result


COLUMNS = [  # title, JSON paths shown joined by " / "
    ("setup", ["setup"]), ("partitions", ["partitions"]),
    ("create / all led s", ["create.create_s", "create.all_led_s"]),
    ("Metadata p50 / p99 ms", ["metadata.metadata_p50_ms", "metadata.metadata_p99_ms"]),
    ("produce 1000p / 6p rec/s / ratio", ["throughput.wide_produce_rps",
     "throughput.narrow_produce_rps", "throughput.produce_rps_ratio_wide_to_narrow"]),
    ("consume 1000p / 6p rec/s / ratio", ["throughput.wide_consume_rps",
     "throughput.narrow_consume_rps", "throughput.consume_rps_ratio_wide_to_narrow"]),
    ("broker restart: unfenced / in every ISR s", ["broker_restart.unfenced_s",
                                                   "broker_restart.in_every_isr_s"]),
    ("broker restart: others fenced / controller changes",
     ["broker_restart.other_brokers_fenced", "broker_restart.controller_changes"]),
    ("controller SIGKILL → commit s", ["controller_failover.first_commit_median_s"]),
    ("full restart → ready s", ["full_restart.ready_s"]),
    ("unclean exits at full stop", ["full_restart.not_clean"]),
]


def _cell(result: dict, path: str) -> str:
    node = result
    for k in path.split("."):
        if not isinstance(node, dict) or k not in node:
            return "FAILED" if isinstance(node, dict) and "error" in node else "-"
        node = node[k]
    return f"{node:,}" if isinstance(node, int) else \
        (", ".join(node) if isinstance(node, list) else str(node))


def print_table(results: list[dict]) -> None:
    print("| " + " | ".join(t for t, _ in COLUMNS) + " |\n|" + "---|" * len(COLUMNS))
    for r in results:
        print("| " + " | ".join(" / ".join(_cell(r, p) for p in paths)
                                for _, paths in COLUMNS) + " |")
    print("\n| setup | partitions | process | idle CPU % of a core | RSS MiB |\n|---|---|---|---|---|")
    for r in results:
        for name, v in (r.get("idle") or {}).items():
            if isinstance(v, dict) and "cpu_pct" in v:
                print(f"| {r['setup']} | {r['partitions']} | {name} | {v['cpu_pct']} | "
                      f"{v['rss_mib']} |")
    for r in results:
        for k, v in [("run", r)] + list(r.items()):
            if isinstance(v, dict) and "error" in v:
                print(f"FAILED {r['setup']} {r['partitions']} {k}: {v['error']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", default="1000", help="comma-separated partition counts")
    ap.add_argument("--setup", default="rf3,rf1", help="rf3, rf1 or both (comma-separated)")
    ap.add_argument("--topics-per-request", type=int, default=20)
    ap.add_argument("--settle-seconds", type=float, default=5)
    ap.add_argument("--idle-seconds", type=float, default=30)
    ap.add_argument("--metadata-requests", type=int, default=50)
    ap.add_argument("--records", type=int, default=200_000, help="per throughput round; 0 skips")
    ap.add_argument("--rounds", type=int, default=1, help="throughput rounds per partition set")
    ap.add_argument("--controller-kills", type=int, default=1)
    ap.add_argument("--data-dir", help="keep clusters' data here (default: a temp dir, removed)")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    counts = [int(x) for x in args.partitions.split(",") if x.strip()]
    setups = [s.strip() for s in args.setup.split(",") if s.strip()]
    for s in setups:
        if s not in SETUPS:
            ap.error(f"unknown setup {s!r}: expected rf3 or rf1")
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-partitions-") as tmp:
        workdir = Path(args.data_dir).resolve() if args.data_dir else Path(tmp)
        for n in counts:
            for s in setups:
                results.append(run_one(s, n, args, workdir))
                if args.out:                            # after each run: a crash keeps the rest
                    Path(args.out).write_text(json.dumps(results, indent=2))
    print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
