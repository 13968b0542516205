"""python -m chaos_tests.campaign --rounds N --faults kill,pause,isolate,... --seed S [--out DIR]

Starts a 3-controller, 3-broker cluster, every node at its own loopback address (so nftables
can cut links between nodes while this process still reaches all of them), runs N rounds of
seeded random fault schedules under the campaign workloads, checks every round, shrinks the
first failing schedule by delta debugging (re-running the round with subsets of its faults),
and writes DIR/report.json and DIR/report.html. Exit status 1 when a round found an anomaly
or the harness could not finish one (the rounds before it are still reported),
2 on bad arguments or a machine that cannot make the asked faults.

    --schedule '<json>'  run exactly this schedule (what a report's shrunk section prints)
    --overlap            faults come in overlapping pairs (two at once, on different nodes)
    --idle-partitions N  the cluster holds N partitions besides the rounds' topics (RF 3, in
                         topics of 100, created and fully replicated before the first round)
    --partitions P       the round's keyed topic has P partitions (3), its keys spread over them
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

from chaos_tests.campaign import disk, report as report_mod, timejump
from chaos_tests.campaign.nemesis import CLOCK_FILE
from chaos_tests.campaign.runner import PARTITIONS, RoundResult, run_round
from chaos_tests.campaign.scale import (create_idle_partitions, idle_topic_names,
                                        replicas_converged)
from chaos_tests.campaign.schedule import (check_available, ddmin, dumps, loads, make_schedule,
                                           parse_faults, round_seed)
from chaos_tests.live.cluster import low_port_cluster

OVERRIDES = {"broker.heartbeat.interval.ms": "500", "replica.lag.time.max.ms": "3000"}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m chaos_tests.campaign", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--faults", default="kill,pause,isolate")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=None, help="report directory (default: a new "
                   "temporary one, printed)")
    p.add_argument("--round-seconds", type=float, default=10.0)
    p.add_argument("--max-faults", type=int, default=3, help="faults per round, at most")
    p.add_argument("--shrink-runs", type=int, default=6,
                   help="re-runs allowed to shrink a failing schedule (0: do not shrink)")
    p.add_argument("--schedule", default=None, help="a JSON schedule to run instead")
    p.add_argument("--overlap", action="store_true",
                   help="each fault joined by a second one on other nodes while it holds")
    p.add_argument("--idle-partitions", type=int, default=0,
                   help="partitions the cluster holds besides the rounds' topics")
    p.add_argument("--partitions", type=int, default=PARTITIONS,
                   help="partitions of the round's keyed topic")
    args = p.parse_args(argv)
    args.out_dir = None                 # main's report directory
    if args.rounds < 1 or args.round_seconds < 3:
        p.error("--rounds must be ≥ 1 and --round-seconds ≥ 3")
    if args.idle_partitions < 0 or not 1 <= args.partitions <= 10_000:
        p.error("--idle-partitions must be ≥ 0 and --partitions from 1 to 10000")
    try:
        args.fault_list = parse_faults(args.faults)
        args.fixed = loads(args.schedule) if args.schedule else None
    except ValueError as exc:
        p.error(str(exc))
    return args


def _shrink(cluster, failed: RoundResult, args) -> dict:
    tries = []

    def fails(steps) -> bool:
        r = run_round(cluster, f"{failed.round}s{len(tries)}", failed.seed, steps,
                      args.round_seconds, args.partitions, args.idle_partitions)
        tries.append(r)
        return not r.ok
    steps, runs = ddmin(list(failed.schedule), fails, args.shrink_runs)
    cmd = (f"python -m chaos_tests.campaign --rounds 1 --seed {failed.seed} "
           f"--round-seconds {args.round_seconds} --faults {args.faults} "
           f"{'--overlap ' if args.overlap else ''}"
           f"--idle-partitions {args.idle_partitions} --partitions {args.partitions} "
           f"--schedule '{dumps(steps)}'")
    return {"round": failed.round, "seed": failed.seed, "runs": runs,
            "schedule": [s.as_dict() for s in steps],
            "command": cmd}


def _cluster(data: Path, faults: list[str]):
    """The campaign's cluster, with what the asked classes need: each node's clock offset
    file (clock), each broker's log dir on a tmpfs of its own (disk-full), every node under
    libfaketime (time-jump)."""
    overrides = dict(OVERRIDES)
    if "clock" in faults:
        overrides["raftka.clock.offset.file"] = CLOCK_FILE
    cluster = low_port_cluster(data, overrides, node_addresses=True)
    if "time-jump" in faults:           # every node under libfaketime, at offset 0 until a jump
        for node in cluster.layout.node_hosts():
            cluster.layout.node_env[node] = timejump.node_env(timejump.node_dir(data, node))
    mounts = [data / f"broker-{b}" for b in cluster.layout.broker_ids] \
        if "disk-full" in faults else []
    for m in mounts:
        disk.mount(m)
    return cluster, mounts


def _unmount(mounts: list[Path], keep: bool) -> None:
    for m in mounts:
        disk.unmount(m, m.with_name(m.name + ".kept") if keep else None)


def run_campaign(args) -> dict:
    faults = args.fault_list + [s.fault for s in (args.fixed or [])]
    check_available(faults)
    data = Path(tempfile.mkdtemp(prefix="raftka-campaign-"))
    cluster, mounts = _cluster(data, faults)
    rounds, started = [], time.monotonic()
    try:
        cluster.start()
    except BaseException:
        _unmount(mounts, keep=True)
        raise
    aborted = shrunk = None
    try:
        aborted = _play(cluster, args, rounds)
        failed = next((r for r in rounds if not r.ok), None)
        shrunk = _shrink(cluster, failed, args) if failed and args.shrink_runs > 0 else None
    finally:
        cluster.stop()
        # the nodes' data and logs stay for a post-mortem when something failed
        clean = bool(rounds) and all(r.ok for r in rounds) and len(rounds) == args.rounds
        _unmount(mounts, keep=not clean)
        if clean:
            shutil.rmtree(data, ignore_errors=True)
        else:
            print(f"cluster data and logs kept in {data} (tmpfs log dirs copied to "
                  f"broker-N.kept)" if mounts else f"cluster data and logs kept in {data}",
                  flush=True)
    records = [report_mod.round_record(r) for r in rounds]
    args.results = rounds
    bad = [r for r in records if not r["ok"]]
    ops = sum(r["history_ops"] for r in records)
    return {"seed": args.seed, "faults": args.fault_list, "overlap": args.overlap,
            "round_seconds": args.round_seconds, "aborted": aborted,
            "rounds": records, "shrunk": shrunk, "elapsed_s": round(time.monotonic() - started, 1),
            "summary": f"{len(records)} rounds, {ops} recorded operations, "
                       f"{len(bad)} round(s) with anomalies"
                       + (f"; ABORTED at {aborted}" if aborted else "")}


def _play(cluster, args, rounds: list) -> str | None:
    """Run the rounds into `rounds`; a round the harness could not finish (a client call that
    gave up, a node that would not restart) ends the campaign with what it says, and the
    rounds done so far are still reported. Returns that reason, or None."""
    if args.idle_partitions:
        started = time.monotonic()
        try:
            create_idle_partitions(cluster.bootstrap, args.idle_partitions)
        except Exception as exc:        # noqa: BLE001 - reported as the campaign's end
            traceback.print_exc()
            return f"creating {args.idle_partitions} idle partitions: {type(exc).__name__}: {exc}"
        ready = replicas_converged(cluster, idle_topic_names(args.idle_partitions)[0],
                                   args.idle_partitions)
        if not ready.ok:
            return f"{args.idle_partitions} idle partitions never fully replicated: {ready}"
        print(f"{args.idle_partitions} idle partitions created and fully replicated in "
              f"{time.monotonic() - started:.1f} s", flush=True)
    for n in range(args.rounds):
        seed = args.seed if args.fixed else round_seed(args.seed, n)
        schedule = args.fixed if args.fixed is not None else \
            make_schedule(seed, args.fault_list, args.round_seconds, args.max_faults,
                          args.overlap)
        try:
            r = run_round(cluster, n, seed, schedule, args.round_seconds, args.partitions,
                          args.idle_partitions)
        except Exception as exc:        # noqa: BLE001 - reported, with the rounds before it
            traceback.print_exc()
            return f"round {n} seed {seed} [{', '.join(s.label() for s in schedule)}]: " \
                   f"{type(exc).__name__}: {exc}"
        print(f"round {n} seed {seed}: {'ok' if r.ok else 'ANOMALY'} "
              f"[{', '.join(s.label() for s in schedule) or 'no fault'}]", flush=True)
        if not r.ok:                # said at once: a crash later must not lose it
            for c in r.checks:
                if not c.ok:
                    print(f"  {c}", flush=True)
        if args.out_dir is not None:
            _dump_round(args.out_dir, r)
        rounds.append(r)
    return None


def _dump_round(out: Path, r: RoundResult) -> None:
    """A round's raw histories, for post-mortems, written as soon as the round ends (a client
    library that crashes the campaign later — librdkafka once segfaulted after a fenced
    transactional producer's fatal error — leaves them behind)."""
    r.history.dump(out / f"round-{r.round}.history.jsonl")
    r.txn_history.dump(out / f"round-{r.round}.txn-history.jsonl")
    (out / f"round-{r.round}.ops.jsonl").write_text(r.log.dumps())


def main(argv=None) -> int:
    args = parse_args(argv)
    from clients.cli.netfaults.nft import NetFaultUnavailable
    out = args.out or Path(tempfile.mkdtemp(prefix="raftka-campaign-report-"))
    out.mkdir(parents=True, exist_ok=True)
    args.out_dir = out
    print(f"round histories and the report go to {out}", flush=True)
    try:
        report = run_campaign(args)
    except NetFaultUnavailable as exc:
        print(f"campaign: {exc}", file=sys.stderr)
        return 2
    j, h = report_mod.write(report, out)
    print(f"{report['summary']}\nreport: {j}\n        {h}")
    return 1 if report["aborted"] or any(not r["ok"] for r in report["rounds"]) else 0


if __name__ == "__main__":
    sys.exit(main())
