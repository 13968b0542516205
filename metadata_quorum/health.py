"""A controller's `/metrics`, `/health/live` and `/health/ready` (on `raftka.metrics.listener`,
served by common/http_endpoint.py like a broker's).

Ready = a voter of the quorum (a joining controller is not, until added), a Raft leader known,
and the committed metadata applied (pysyncobj's applied index reached its commit index, and the
service mirrors it). Metrics: Kafka's ActiveControllerCount (0/1), the Raft term, the committed
metadata offset, OfflinePartitionsCount from the committed image, each broker's metadata lag
(as of its last fetch from this controller: brokers follow the active one), and the process's
CPU/RSS/fds."""

from __future__ import annotations

import dataclasses
import time

from common.http_endpoint import PROMETHEUS, health_answer, live_answer
from common.prometheus import labels, render_families
from common.process_metrics import process_families


def metrics_listener(props: dict) -> str | None:
    """raftka.metrics.listener; in combined mode (process.roles=broker,controller) the broker
    serves that one, and the controller only raftka.controller.metrics.listener."""
    own = props.get("raftka.controller.metrics.listener")
    if "broker" in props.get("process.roles", "controller"):
        return own
    return own or props.get("raftka.metrics.listener")


@dataclasses.dataclass(frozen=True)
class ControllerHealth:
    voter: bool               # part of the voter set (not a joining node waiting to be added)
    leader_id: int            # Raft leader known to this node (-1: none)
    commit_index: int         # Raft commit index
    last_applied: int         # Raft entries applied to the state machine
    serving: bool             # the service subscribed to the log (its image mirrors it)


def readiness(h: ControllerHealth) -> tuple[bool, list[str]]:
    reasons = []
    if not h.voter:
        reasons.append("not a voter of the controller quorum (joining: not added yet)")
    if h.leader_id < 0:
        reasons.append("no Raft leader known")
    if h.last_applied < h.commit_index:
        reasons.append(f"metadata not applied: Raft entry {h.last_applied} of {h.commit_index}")
    if not h.serving:
        reasons.append("controller service not started")
    return not reasons, reasons


def of_service(svc, status: dict) -> ControllerHealth:
    return ControllerHealth(voter=svc.is_voter, leader_id=status["leader_id"],
                            commit_index=status["commit_index"],
                            last_applied=status["last_applied"], serving=svc.token is not None)


def families(svc, status: dict) -> list:
    offline, leaderless = svc.controller.image.leaderless_counts()
    now_ms = int(time.time() * 1000)
    lags = sorted(svc.observers.items())
    fams = [
        ("raftka_controller_active", "gauge", "1 on the active controller (ActiveControllerCount).",
         [("", int(svc.active))]),
        ("raftka_controller_raft_term", "gauge", "Raft term as this controller knows it.",
         [("", status["term"])]),
        ("raftka_controller_raft_commit_index", "gauge", "Raft commit index.",
         [("", status["commit_index"])]),
        ("raftka_controller_metadata_offset", "gauge", "Last committed metadata offset applied.",
         [("", svc.next_offset - 1)]),
        ("raftka_controller_offline_partitions", "gauge",
         "Partitions without a leader in the committed image (OfflinePartitionsCount; alert on "
         "the active controller's).", [("", offline)]),
        ("raftka_controller_leaderless_partitions", "gauge",
         "Partitions without a leader or led by a fenced or unregistered broker.",
         [("", leaderless)]),
        ("raftka_controller_broker_metadata_lag", "gauge",
         "Committed metadata records a broker had not fetched yet at its last fetch here.",
         [(labels(broker=b), max(0, svc.next_offset - off)) for b, (off, _) in lags]),
        ("raftka_controller_broker_metadata_fetch_age_seconds", "gauge",
         "Seconds since a broker's last metadata fetch from this controller.",
         [(labels(broker=b), f"{max(0, now_ms - ts) / 1000:.3f}") for b, (_, ts) in lags]),
    ]
    fams += svc.stats.families()
    if getattr(svc, "request_stats", None) is not None:
        fams += svc.request_stats.families()
    return fams + process_families()


def routes(svc) -> dict:
    def metrics():
        text = "\n".join(render_families(families(svc, svc.quorum.status()))) + "\n"
        return 200, PROMETHEUS, text.encode()

    def ready():
        status = svc.quorum.status()
        ok, reasons = readiness(of_service(svc, status))
        return health_answer(ok, reasons, node_id=svc.config.node_id,
                             leader_id=status["leader_id"], active=svc.active)
    return {"/metrics": metrics, "/health/live": live_answer, "/health/ready": ready}
