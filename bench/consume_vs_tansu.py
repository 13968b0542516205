"""Small-record consume, Raftka vs Tansu, with nothing else moving (issue #23 item 1).

`broker_vs_tansu.py` consumes right after producing, one consume per system and round, so the
consume rate carries whatever the produce left behind. Here both systems are filled once with
the same load (`--records` x 100 B, RF 1, 6 partitions on Raftka's broker 0, acks=1), then the
same consumer code reads everything from each in turn, alternating for `--rounds` rounds, each
read from offset 0 with a fresh consumer. Per read: records/s, the client's CPU per record
(user + system of this process: librdkafka's threads and the Python loop) and its minor page
faults. Every `--fetch-shape` given (see broker_vs_tansu.FETCH_SHAPES) is read in every
round.

`--tree` (repeatable) reads a Raftka cluster per code tree instead of this tree's one (e.g. the
tree before a change and after it, `bench/code_tree.py`), each filled with the same load and
read in every round beside Tansu; ratios are each tree's against Tansu's in the same round.

    python3 bench/consume_vs_tansu.py [--rounds 12] [--fetch-shape default --fetch-shape equal]
    python3 bench/consume_vs_tansu.py --tree /tmp/before --tree . --fetch-shape default
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.broker_vs_tansu import (FETCH_SHAPES, create_on_broker0,  # noqa: E402
                                   start_raftka, start_tansu, tansu_binary, warm_memory)
from clients.cli import perf  # noqa: E402

TOPIC = "consume-ab"


def read_all(bootstrap: str, n: int, shape: str, group: str) -> dict:
    """One fresh consumer reads the topic's `n` records from offset 0 (perf.consume's loop)."""
    config = {**FETCH_SHAPES[shape], "group.id": group}
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    out = perf.consume(bootstrap, TOPIC, n, progress=False, config=config)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    return {"records": out["records"], "rps": out["records_per_s"],
            "client_cpu_us_per_msg": round(cpu / max(1, out["records"]) * 1e6, 3),
            "minor_faults": r1.ru_minflt - r0.ru_minflt}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--fetch-shape", action="append", choices=sorted(FETCH_SHAPES),
                    help="repeat; default: both")
    ap.add_argument("--warm-mib", type=int, default=2048)
    ap.add_argument("--tree", action="append",
                    help="a Raftka code tree to read (repeat); default: this one")
    args = ap.parse_args()
    shapes = args.fetch_shape or sorted(FETCH_SHAPES)
    work = tempfile.mkdtemp(prefix="consume-ab-")
    tansu = tansu_binary(work)
    if args.warm_mib:
        warm_memory(work, args.warm_mib)
    proc, tansu_bootstrap = start_tansu(tansu)
    clusters: list = []
    try:
        systems = {"tansu": tansu_bootstrap}
        perf.ensure_topic(tansu_bootstrap, TOPIC, 6, 1)
        trees = args.tree or [None]
        for i, tree in enumerate(trees):
            cluster = start_raftka(tree, Path(work) / f"raftka-{i}")
            clusters.append(cluster)
            name = "raftka" if len(trees) == 1 else f"raftka[{tree}]"
            systems[name] = cluster.bootstrap.split(",")[0]
            create_on_broker0(systems[name], TOPIC)
        for bootstrap in systems.values():
            perf.produce(bootstrap, TOPIC, args.records, 100, acks="1", progress=False)
        time.sleep(1)
        results: dict = {(s, shape): [] for s in systems for shape in shapes}
        for rnd in range(args.rounds):
            order = list(systems) if rnd % 2 == 0 else list(systems)[::-1]
            for shape in shapes:
                for system in order:
                    r = read_all(systems[system], args.records, shape, f"ab-{rnd}-{shape}")
                    if r["records"] != args.records:
                        raise RuntimeError(f"{system}: read {r['records']} of {args.records}")
                    results[(system, shape)].append(r)
                    print(json.dumps({"round": rnd, "system": system, "shape": shape, **r}),
                          flush=True)
        report(results, shapes, [s for s in systems if s != "tansu"])
    finally:
        for cluster in clusters:
            cluster.stop()
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)


def report(results: dict, shapes: list, raftkas: list) -> None:
    print("\nmedians; ratio = raftka / tansu (per round, then its median)")
    for shape in shapes:
        t = results[("tansu", shape)]
        for name in raftkas:
            r = results[(name, shape)]
            ratios = [b["rps"] / a["rps"] for a, b in zip(t, r)]
            print(f"  {name}, fetch shape {shape}: consume rate ratio median "
                  f"{statistics.median(ratios):.3f} (rounds: "
                  f"{' '.join(f'{x:.2f}' for x in ratios)}; "
                  f"{sum(x >= 1 for x in ratios)} of {len(ratios)} at or above 1)")
            for key in ("rps", "client_cpu_us_per_msg", "minor_faults"):
                a = statistics.median(x[key] for x in t)
                b = statistics.median(x[key] for x in r)
                print(f"    {key:>22}: tansu {a:>10} | {name} {b:>10} "
                      f"({b / a if a else 0:.2f})")


if __name__ == "__main__":
    main()
