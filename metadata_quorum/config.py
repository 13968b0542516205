"""Controller configuration (Kafka property names); the property-file helpers are common.properties.

| key | default | meaning |
|---|---|---|
| node.id | required | this controller's id; unique across controllers and brokers |
| process.roles | controller | `controller`, or `broker,controller` for combined mode |
| controller.quorum.voters | required | `id@host:port,...`: every controller's Kafka-protocol listener. A controller whose node.id is not listed *joins* a running quorum: list the current voters, start it, then `raftka quorum add-controller` (KIP-853); once added, the voter set in the metadata log (VotersRecord) is what counts, this list is only where to start |
| listeners | required | `CONTROLLER://host:port`: where brokers and admin tools reach this controller |
| raftka.controller.raft.peers | required | `id@host:port,...`: every voter's Raft (pysyncobj) port, and this node's own when it joins; Kafka has no separate Raft port, pysyncobj needs one |
| raftka.controller.raft.password | built-in development value | shared secret, the same on every controller: encrypts and authenticates Raft traffic. Required (not the development value, not a `change-me` placeholder, not empty) when this controller's Raft address is not a loopback address: pysyncobj decodes pickles, so whoever knows the password can run code on the controller (see raft_password_problem) |
| metadata.log.dir | ./raftka-data/controller-<id> | Raft journal and snapshots |
| broker.session.timeout.ms | 9000 | a broker without a heartbeat for this long is fenced |
| num.partitions | 1 | partitions of a topic created without a count |
| default.replication.factor | 1 | replication factor of a topic created without one |
| min.insync.replicas | 1 | of topics without a topic or cluster-wide setting: decides when replicas leaving the ISR become eligible leaders (KIP-966 ELR). Set it to the brokers' value: a controller value above the brokers' could elect a replica missing records the leader committed |
| raftka.controller.stream.tail.records | 50000 | committed records kept for the metadata stream; a broker further behind loads a snapshot |
| raftka.controller.raft.log.compaction.min.entries | 20000 | pysyncobj compacts its Raft log into a snapshot (`raft.dump`) past this many entries... |
| raftka.controller.raft.log.compaction.min.time.ms | 60000 | ...or this long after the last compaction, whichever comes first |
| raftka.controller.raft.log.compaction.min.records | 100000 | ...or once this many metadata records were applied since the last one (an entry holds up to hundreds of records: with many partitions the entry count alone is never reached, and a restart replays everything since the last snapshot) |
| raftka.network.source.address | unset | local IP address this controller's outgoing connections leave from (the Raft port's always leave from the Raft address's host); unset, the kernel chooses |
| raftka.metrics.listener | unset | host:port of the `/metrics`, `/health/live` and `/health/ready` HTTP endpoint (metadata_quorum/health.py); off when unset. In combined mode the broker serves it and the controller uses `raftka.controller.metrics.listener` |
| raftka.controller.raft.fsync | true | fsync the Raft journal before an entry counts toward a commit (group commit: one fsync per pysyncobj tick). `false` only to measure what fsync costs (bench/metadata_quorum.py): a power loss of a majority of controllers can then lose committed metadata |
| raftka.controller.pipeline | true | the active controller pipelines commands (metadata_quorum/pipeline.py): each runs against the committed image plus the records in flight and the next starts before they commit; answers still wait for the commit. `false`: one command at a time, each waiting for its commit before the next runs (the behaviour before pipelining; for benchmarks side by side) |
| raftka.controller.test.raft.sync.record | false | tests only: after each fsync the journal's synced length is written to `raft.log.synced`, so a test can cut the journal back to it after a SIGKILL (a simulated power loss) |
| raftka.controller.test.voter.change.pause.ms | 0 | tests only: a voter change waits this long between its PENDING record and the Raft membership entry, so a test can fail the active controller in between |
"""

from __future__ import annotations

import dataclasses
import ipaddress
import sys

from common.properties import ConfigError, parse_endpoint, parse_voters


PASSWORD_KEY = "raftka.controller.raft.password"
FSYNC_KEY = "raftka.controller.raft.fsync"
PIPELINE_KEY = "raftka.controller.pipeline"
SYNC_RECORD_KEY = "raftka.controller.test.raft.sync.record"
# used when the key is absent: acceptable only while the Raft port is on loopback
DEV_PASSWORD = "raftka-dev-only-password"
# what the shipped examples used to carry; a copied file must not go live with one of these
PLACEHOLDER_MARKERS = ("change-me", "changeme", "change_me")


def _flag(props: dict, key: str, default: bool) -> bool:
    value = props.get(key)
    return default if value is None else value.strip().lower() == "true"


def _flag_problems(props: dict) -> list[str]:
    return [f"{key}={props[key]!r}: must be true or false" for key in (FSYNC_KEY, PIPELINE_KEY, SYNC_RECORD_KEY)
            if props.get(key, "true").strip().lower() not in ("true", "false")]


def is_loopback(host: str) -> bool:
    """A literal loopback address (127.0.0.0/8, ::1) or `localhost`; any other name counts as
    reachable (a name is not resolved here: what it resolves to can change)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def raft_password_problem(host: str, password: str | None) -> str | None:
    """Why this Raft password must not be used on `host` (this controller's Raft address), or
    None. pysyncobj unpickles whatever a peer sends once it decrypts; its password (Fernet: AES
    + HMAC, key from PBKDF2) is the port's only protection, so a well-known one is code execution
    for anyone who reaches the port. Loopback is only reachable from this machine, where the
    built-in value is tolerated (the service warns); `raftka dev` writes a random one anyway."""
    how = (f"set {PASSWORD_KEY} to the same long random secret on every controller, e.g. the "
           "output of: python3 -c 'import secrets; print(secrets.token_urlsafe(32))'")
    if password is not None and not password.strip():
        return f"{PASSWORD_KEY} is empty: {how}"
    if is_loopback(host):
        return None
    if password is None or password == DEV_PASSWORD:
        what = "is not set (the built-in development password would be used)"
    elif any(m in password.lower() for m in PLACEHOLDER_MARKERS):
        what = f"is the placeholder {password!r}"
    else:
        return None
    return (f"{PASSWORD_KEY} {what}, but the Raft port listens on {host}, beyond loopback: "
            f"anyone reaching it could run code on this controller; {how}")


@dataclasses.dataclass(frozen=True)
class ControllerConfig:
    node_id: int
    voters: dict[int, tuple[str, int]]
    raft_peers: dict[int, tuple[str, int]]
    listener: tuple[str, int]
    metadata_dir: str
    password: str
    session_timeout_ms: int = 9000
    num_partitions: int = 1
    default_replication_factor: int = 1
    stream_tail_records: int = 50_000
    # a broker whose heartbeat connection closes is fenced after this long without a new
    # heartbeat (0: only its session timeout fences it); see metadata_quorum/service.py
    # 500: librdkafka's leader lookups tick about once a second; a leader fenced at 0.5 s is found
    # on the first tick after a crash (~1 s to the first ack), one fenced at 1 s only on the third
    disconnect_fence_ms: int = 500
    min_insync_replicas: int = 1
    raft_compaction_min_entries: int = 20_000
    raft_compaction_min_time_ms: int = 60_000
    raft_compaction_min_records: int = 100_000
    voter_change_pause_ms: int = 0          # tests only (see the table)
    # the raw properties, for the listener's security settings (same keys as a broker's:
    # listener.security.protocol.map's CONTROLLER entry, ssl.*, sasl.*, raftka.inter.node.*)
    props: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @property
    def raft_fsync(self) -> bool:
        return _flag(self.props, FSYNC_KEY, True)

    @property
    def pipeline(self) -> bool:
        return _flag(self.props, PIPELINE_KEY, True)

    @property
    def raft_sync_record(self) -> bool:
        return _flag(self.props, SYNC_RECORD_KEY, False)

    @property
    def joining(self) -> bool:
        """Not one of the configured voters: this controller joins a running quorum."""
        return self.node_id not in self.voters

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> "ControllerConfig":
        problems = []

        def need(key):
            if key not in props:
                problems.append(f"{key}: required")
            return props.get(key)

        def as_int(key, default, minimum):
            try:
                v = int(props.get(key, default))
            except ValueError:
                problems.append(f"{key}={props.get(key)!r}: not an integer")
                return default
            if v < minimum:
                problems.append(f"{key}={v}: must be >= {minimum}")
            return v

        node_id = as_int("node.id", -1, 0) if need("node.id") is not None else -1
        voters = peers = {}
        listener = ("127.0.0.1", 0)
        try:
            if need("controller.quorum.voters"):
                voters = parse_voters(props["controller.quorum.voters"])
            if need("raftka.controller.raft.peers"):
                peers = parse_voters(props["raftka.controller.raft.peers"])
            if need("listeners"):
                # in combined mode the CONTROLLER listener is the controller's, others the broker's
                entries = [parse_endpoint(x) for x in props["listeners"].split(",") if x.strip()]
                chosen = next((e for e in entries if e[0] == "CONTROLLER"), entries[0])
                listener = (chosen[1], chosen[2])
        except ConfigError as exc:
            problems.append(str(exc))
        # a joining controller (not a voter yet) lists the voters plus its own Raft address
        if voters and peers and set(voters) != set(peers) - ({node_id} - set(voters)):
            problems.append("controller.quorum.voters and raftka.controller.raft.peers name different ids")
        if peers and node_id not in peers and node_id >= 0:
            problems.append(f"node.id {node_id} has no address in raftka.controller.raft.peers")
        elif node_id in peers:
            problem = raft_password_problem(peers[node_id][0], props.get(PASSWORD_KEY))
            if problem:
                problems.append(problem)
        problems.extend(_flag_problems(props))
        if sys.flags.optimize:
            # pysyncobj checks each message's session key and timestamp with `assert`: under -O
            # a captured message could be replayed to the Raft port and accepted
            problems.append("python -O / PYTHONOPTIMIZE strips the checks pysyncobj's Raft port "
                            "makes against replayed messages: run controllers without it")
        # parsed before the check so a bad value is reported instead of silently defaulted
        numbers = (as_int("broker.session.timeout.ms", 9000, 1),
                   as_int("num.partitions", 1, 1), as_int("default.replication.factor", 1, 1),
                   as_int("raftka.controller.stream.tail.records", 50_000, 2),
                   as_int("raftka.controller.disconnect.fence.ms", 500, 0),
                   as_int("min.insync.replicas", 1, 1),
                   as_int("raftka.controller.raft.log.compaction.min.entries", 20_000, 1),
                   as_int("raftka.controller.raft.log.compaction.min.time.ms", 60_000, 1),
                   as_int("raftka.controller.raft.log.compaction.min.records", 100_000, 1),
                   as_int("raftka.controller.test.voter.change.pause.ms", 0, 0))
        if not problems:
            try:    # the listener's TLS/SASL settings, checked now rather than at first connect
                from common.listener_security import controller_listener_security
                controller_listener_security(props, lambda: None)
            except ValueError as exc:
                problems.append(str(exc))
        if problems:
            raise ConfigError("; ".join(problems))
        return cls(node_id, voters, peers, listener,
                   props.get("metadata.log.dir", f"./raftka-data/controller-{node_id}"),
                   props.get(PASSWORD_KEY, DEV_PASSWORD),
                   *numbers, props=dict(props))
