"""python -m chaos_tests.sim --seed N [--events K]   replay one seed
python -m chaos_tests.sim --seeds 1-200 [--events K]   run many (stops at the first failure)
A failing run prints its violation and can dump the history (--history FILE)."""

from __future__ import annotations

import argparse
import logging
import sys
import time

from chaos_tests.sim.simulation import SimulationFailed, run


def parse_seeds(text: str) -> list[int]:
    seeds = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            seeds += range(int(lo), int(hi) + 1)
        else:
            seeds.append(int(part))
    return seeds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaos_tests.sim", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, help="one seed to run")
    ap.add_argument("--seeds", help="seeds to run: '1-50' or '3,7,9'")
    ap.add_argument("--events", type=int, default=5000, help="events before healing (5000)")
    ap.add_argument("--history", help="write the failing run's history (JSON lines) here")
    ap.add_argument("--safety-only", action="store_true",
                    help="report replicas that stay apart after healing instead of failing")
    args = ap.parse_args(argv)
    logging.getLogger("partition_server").setLevel(logging.ERROR)   # expected fault chatter
    try:
        seeds = [args.seed] if args.seed is not None else parse_seeds(args.seeds or "")
    except ValueError:
        ap.error("--seeds takes ranges like 1-50 or lists like 3,7,9")
    if not seeds:
        ap.error("give --seed N or --seeds A-B")
    for seed in seeds:
        t0 = time.perf_counter()
        try:
            r = run(seed, args.events, require_convergence=not args.safety_only)
        except SimulationFailed as exc:
            print(f"FAIL {exc}", file=sys.stderr)
            if args.history and exc.history is not None:
                exc.history.dump(args.history)
                print(f"history written to {args.history}", file=sys.stderr)
            return 1
        print(f"seed {seed}: ok  {r.events} events, {r.virtual_ms / 1000:.1f}s virtual, "
              f"{r.acked}/{r.produced} acked, {r.consumed} consumed, faults {r.faults} "
              f"({time.perf_counter() - t0:.1f}s)")
        if not r.converged:
            print(f"  replicas stayed apart after healing (liveness): {r.stuck}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
