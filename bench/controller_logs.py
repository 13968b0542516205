"""What the controllers logged during a step of bench/partitions.py (split out of it to keep
modules small): read from the part of each controller's log appended since the step began."""

from __future__ import annotations

from clients.cli.dev import CONTROLLER_IDS


class ControllerLogs:
    """What the controllers logged since a point: fencings of brokers other than the one being
    restarted (a live broker fenced: leaderships move for nothing) and active-controller
    changes, read from the appended part of each controller's log."""

    def __init__(self, cluster):
        self.paths = [cluster.layout.log_path(f"controller-{cid}") for cid in CONTROLLER_IDS]
        self.start = [p.stat().st_size if p.exists() else 0 for p in self.paths]

    def lines(self) -> list[str]:
        out = []
        for path, start in zip(self.paths, self.start):
            if path.exists():
                with open(path, "rb") as f:
                    f.seek(start)
                    out += f.read().decode(errors="replace").splitlines()
        return out

    def counts(self, restarted: int) -> dict:
        lines = self.lines()
        fenced = [line.split("fencing broker ", 1)[1].split(":", 1)[0]
                  for line in lines if "fencing broker " in line]
        return {"other_brokers_fenced": sum(1 for b in fenced if b != str(restarted)),
                "controller_changes": sum(1 for line in lines if " is now active " in line)}
