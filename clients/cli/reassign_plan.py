"""The pure part of `raftka reassign`: kafka-reassign-partitions.sh's JSON formats, the proposed
assignment of `generate`, the throttle configs of `execute`, the verdicts of `verify` and the
numbers of the progress view. No I/O: clients/cli/reassign.py talks to the cluster.

Formats (Kafka's):
  topics to move      {"version": 1, "topics": [{"topic": "foo"}, ...]}
  reassignment plan   {"version": 1, "partitions": [{"topic": "foo", "partition": 0,
                        "replicas": [1, 2, 3], "log_dirs": ["any", "any", "any"]}, ...]}
`log_dirs` is optional: per replica "any" or an absolute path, one of that broker's log.dirs
(JBOD): `execute` then asks the broker to put (or move) the replica there (AlterReplicaLogDirs,
as kafka-reassign-partitions.sh does).
Every problem is a `PlanError` whose text names the entry at fault.
"""

from __future__ import annotations

import dataclasses
import json
import random

Assignment = dict  # {(topic, partition): [broker ids]}


class PlanError(ValueError):
    """A plan or topics file that cannot be used, with a message for the user."""


def _load(text: str, what: str):
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise PlanError(f"{what} must be a JSON object")
    version = doc.get("version", 1)
    if version != 1:
        raise PlanError(f"{what}: unsupported version {version!r} (only 1)")
    return doc


def _nonneg_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def parse_topics_to_move(text: str) -> list[str]:
    doc = _load(text, "the topics-to-move file")
    topics = doc.get("topics")
    if not isinstance(topics, list) or not topics:
        raise PlanError('the topics-to-move file needs a non-empty "topics" list')
    names = []
    for i, entry in enumerate(topics):
        name = entry.get("topic") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            raise PlanError(f'topics[{i}]: expected {{"topic": "<name>"}}')
        if name in names:
            raise PlanError(f"topic {name!r} is listed twice")
        names.append(name)
    return names


def parse_reassignment(text: str) -> Assignment:
    """{(topic, partition): target replicas}, in file order."""
    doc = _load(text, "the reassignment file")
    parts = doc.get("partitions")
    if not isinstance(parts, list) or not parts:
        raise PlanError('the reassignment file needs a non-empty "partitions" list')
    plan: Assignment = {}
    for i, entry in enumerate(parts):
        if not isinstance(entry, dict):
            raise PlanError(f"partitions[{i}] is not an object")
        topic, partition, replicas = entry.get("topic"), entry.get("partition"), entry.get("replicas")
        if not isinstance(topic, str) or not topic:
            raise PlanError(f'partitions[{i}]: "topic" must be a non-empty string')
        if not _nonneg_int(partition):
            raise PlanError(f'partitions[{i}] ({topic}): "partition" must be an integer >= 0')
        where = f"{topic}-{partition}"
        if not isinstance(replicas, list) or not replicas:
            raise PlanError(f'{where}: "replicas" must be a non-empty list of broker ids')
        if not all(_nonneg_int(b) for b in replicas):
            raise PlanError(f"{where}: replicas {replicas} must be broker ids (integers >= 0)")
        if len(set(replicas)) != len(replicas):
            raise PlanError(f"{where}: duplicate replica in {replicas}")
        log_dirs = entry.get("log_dirs")
        if log_dirs is not None:
            if not isinstance(log_dirs, list) or len(log_dirs) != len(replicas):
                raise PlanError(f'{where}: "log_dirs" must list one entry per replica')
            if any(not isinstance(d, str) or (d != "any" and not d.startswith("/"))
                   for d in log_dirs):
                raise PlanError(f'{where}: each of "log_dirs" is "any" or an absolute path')
        if (topic, partition) in plan:
            raise PlanError(f"{where} is listed twice")
        plan[(topic, partition)] = list(replicas)
    return plan


def parse_log_dirs(text: str) -> dict:
    """{(topic, partition, broker): log dir} of the plan's replicas placed in a named directory
    (call after `parse_reassignment` accepted the same text)."""
    out = {}
    for entry in _load(text, "the reassignment file")["partitions"]:
        for broker, d in zip(entry["replicas"], entry.get("log_dirs") or ()):
            if d != "any":
                out[(entry["topic"], entry["partition"], broker)] = d
    return out


def check_brokers(plan: Assignment, brokers) -> None:
    """Every target broker must be registered (else the controller refuses the whole plan)."""
    known = set(brokers)
    for (topic, partition), replicas in plan.items():
        unknown = [b for b in replicas if b not in known]
        if unknown:
            raise PlanError(f"{topic}-{partition}: unknown broker(s) {unknown} "
                            f"(brokers: {sorted(known)})")


def parse_broker_list(text: str) -> list[int]:
    try:
        brokers = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise PlanError(f"--broker-list {text!r}: expected broker ids like 1,2,3") from None
    if not brokers or any(b < 0 for b in brokers):
        raise PlanError(f"--broker-list {text!r}: expected broker ids like 1,2,3")
    if len(set(brokers)) != len(brokers):
        raise PlanError(f"--broker-list {text!r}: duplicate broker id")
    return brokers


def plan_json(plan: Assignment) -> dict:
    return {"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r), "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(plan.items())]}


def dumps(plan: Assignment) -> str:
    """One line, as Kafka prints it (so it can be pasted into a file as is)."""
    return json.dumps(plan_json(plan), separators=(",", ":"))


# -- generate --------------------------------------------------------------------------------------

def assign(partitions: list[int], rf: int, brokers: list[int], rng: random.Random) -> dict:
    """Kafka's rack-unaware AdminUtils.assignReplicasToBrokers: partition p's first replica on
    broker (start + p) mod n, the others at a shift that grows every n partitions, so leaders
    and followers spread evenly; start and shift are random, as in Kafka."""
    n = len(brokers)
    if rf > n:
        raise PlanError(f"replication factor {rf} is larger than the {n} broker(s) in --broker-list")
    start, shift = rng.randrange(n), rng.randrange(n)
    out = {}
    for i, p in enumerate(sorted(partitions)):
        if i > 0 and i % n == 0:
            shift += 1
        first = (i + start) % n
        replicas = [brokers[first]]
        for j in range(rf - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        out[p] = replicas
    return out


def generate(current: Assignment, topics: list[str], brokers: list[int],
             rng: random.Random | None = None) -> Assignment:
    """The proposed plan for moving `topics` onto `brokers`, keeping each partition's
    replication factor (as kafka-reassign-partitions --generate does)."""
    rng = rng or random.Random()
    proposed: Assignment = {}
    for topic in topics:
        parts = {p: r for (t, p), r in current.items() if t == topic}
        if not parts:
            raise PlanError(f"topic {topic!r} does not exist")
        rf = len(parts[min(parts)])
        for p, replicas in assign(list(parts), rf, sorted(brokers), rng).items():
            proposed[(topic, p)] = replicas
    return proposed


# -- execute: throttles ----------------------------------------------------------------------------

def throttle_configs(current: Assignment, plan: Assignment) -> dict[str, tuple[str, str]]:
    """{topic: (leader throttled replicas, follower throttled replicas)} as Kafka sets them: on
    the leader side every current replica (any may lead while the move runs), on the follower
    side the replicas the move adds."""
    leader: dict[str, list[str]] = {}
    follower: dict[str, list[str]] = {}
    for (topic, p), target in sorted(plan.items()):
        existing = current.get((topic, p), [])
        leader.setdefault(topic, []).extend(f"{p}:{b}" for b in existing)
        follower.setdefault(topic, []).extend(f"{p}:{b}" for b in target if b not in existing)
    return {t: (",".join(leader[t]), ",".join(follower.get(t, []))) for t in leader}


def throttled_brokers(current: Assignment, plan: Assignment) -> list[int]:
    brokers = set()
    for key, target in plan.items():
        brokers.update(target)
        brokers.update(current.get(key, []))
    return sorted(brokers)


# -- verify ------------------------------------------------------------------------------------------

COMPLETE, IN_PROGRESS, MISMATCH = "complete", "in progress", "mismatch"


def verdicts(plan: Assignment, current: Assignment, moving: set) -> dict:
    """{(topic, partition): (state, replicas now)}: in progress while the controller lists a move
    (`moving`), else complete when the replica list is the target's (Kafka's verify compares the
    lists, order included), else a mismatch (cancelled, or changed by another move)."""
    out = {}
    for key, target in plan.items():
        now = current.get(key)
        if key in moving:
            out[key] = (IN_PROGRESS, now)
        elif now == list(target):
            out[key] = (COMPLETE, now)
        else:
            out[key] = (MISMATCH, now)
    return out


# -- progress ----------------------------------------------------------------------------------------

@dataclasses.dataclass
class Progress:
    topic: str
    partition: int
    adding: list
    copied: int          # bytes the adding replicas hold
    total: int           # bytes they will hold: the leader's size for each adding replica

    @property
    def remaining(self) -> int:
        return max(0, self.total - self.copied)

    @property
    def fraction(self) -> float:
        return 1.0 if self.total <= 0 else min(1.0, self.copied / self.total)


def progress(moves: dict, leaders: dict, sizes: dict) -> list[Progress]:
    """`moves`: {(topic, p): adding replicas} of moves in progress; `leaders`: {(topic, p):
    leader id}; `sizes`: {broker: {(topic, p): bytes}} (DescribeLogDirs). A replica or leader
    not reported counts as 0 bytes."""
    rows = []
    for key, adding in sorted(moves.items()):
        leader_size = sizes.get(leaders.get(key), {}).get(key, 0)
        copied = sum(min(sizes.get(b, {}).get(key, 0), leader_size) for b in adding)
        rows.append(Progress(key[0], key[1], list(adding), copied, leader_size * len(adding)))
    return rows


def eta_s(remaining: int, copied_delta: int, seconds: float) -> float | None:
    """Seconds left at the rate seen over the last interval; None when nothing moved."""
    if copied_delta <= 0 or seconds <= 0:
        return None
    return remaining / (copied_delta / seconds)


def bar(fraction: float, width: int = 24) -> str:
    done = int(round(max(0.0, min(1.0, fraction)) * width))
    return "[" + "#" * done + "." * (width - done) + f"] {fraction * 100:5.1f}%"


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
