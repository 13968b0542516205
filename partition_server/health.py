"""`/health/ready` of a broker: a pure function of what the broker knows → (ready, reasons).

Ready = registered with the quorum (our registration seen in the metadata image), unfenced,
caught up with the metadata (the image we applied has the last offset the quorum told us of,
within `LAG_SLACK` records: metadata keeps flowing, a healthy broker is always a record or two
behind for a moment), and our partitions' logs loaded: no image opening logs ahead (in
threads) still waiting to be applied, and no log that failed to open."""

from __future__ import annotations

import dataclasses

LAG_SLACK = 10          # records; an idle quorum's heartbeats/no-ops arrive in small steps


@dataclasses.dataclass(frozen=True)
class BrokerHealth:
    registered: bool          # a broker epoch, and that registration is in our image
    fenced: bool              # as the last heartbeat answer said
    applied_offset: int       # metadata offset of the image the broker applied
    replayed_offset: int      # metadata offset the controller client replayed (≥ applied)
    heard_offset: int         # last offset the quorum said it has (-1: not heard yet)
    failed_logs: int = 0      # partitions whose log could not be opened
    log_dir_failed: bool = False


def readiness(h: BrokerHealth) -> tuple[bool, list[str]]:
    reasons = []
    if not h.registered:
        reasons.append("not registered with the controller quorum")
    elif h.fenced:
        reasons.append("fenced by the controller")
    if h.heard_offset < 0:
        reasons.append("no metadata heard from the quorum yet")
    elif h.heard_offset - h.replayed_offset > LAG_SLACK:
        reasons.append(f"metadata behind: replayed offset {h.replayed_offset} of {h.heard_offset}")
    if h.applied_offset < h.replayed_offset - LAG_SLACK:
        reasons.append(f"logs loading: image offset {h.applied_offset} applied, "
                       f"{h.replayed_offset} replayed (opening logs ahead)")
    if h.failed_logs:
        reasons.append(f"{h.failed_logs} partition log(s) failed to open")
    if h.log_dir_failed:
        reasons.append("log directory failed")
    return not reasons, reasons

