"""`raftka dev --demo`, part two (issue 21 item 2): the promise, shown. While a producer writes
with acks=all (Raftka's SyncProducer, idempotent), the leader of partition `demo-0` is killed
(SIGKILL, through the supervisor), the new leader and the time from the kill to the first
acknowledged write are printed, the node is restarted, and the partition is read back from its
start: every acknowledged record of this run must be there exactly once.

Every wait has a deadline and watches a condition (a loaded 2-core machine may be slow; nothing
here relies on a fixed sleep being long enough). Records carry a run id, so records of an earlier
demo on the same data dir are not counted.
"""

from __future__ import annotations

import collections
import threading
import time
import uuid

import trio

from clients.connection import BrokerConnection
from common.security import ClientSecurity
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS
from wire.records.batch import decode_batch, iter_batches

TOPIC, PARTITION = "demo", 0
BURST = 10                  # records in flight at once


_supervisors: list = []     # the dev cluster's, while the failover demo runs


def say(line: str) -> None:
    if any(s.closing for s in _supervisors):
        return          # Ctrl-C: the cluster is stopping under the demo, its lines would mislead
    print(f"demo: {line}", flush=True)


class DemoProducer:
    """A thread producing numbered records to demo-0 with acks=all; remembers what was acked
    and when (monotonic)."""

    def __init__(self, bootstrap: str, security: ClientSecurity, run: str):
        from clients.producer.sync import SyncProducer
        self._producer = SyncProducer(bootstrap, {"acks": "all", "linger.ms": 0,
                                                  "client.id": "raftka-demo"}, security=security)
        self.run = run
        self.acked: dict[str, float] = {}
        self.failed: list[str] = []
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, daemon=True, name="demo-producer")

    def start(self) -> None:
        self._thread.start()

    def _on_delivery(self, value: str):
        def done(meta, exc):
            with self._cond:
                if exc is None:
                    self.acked[value] = time.monotonic()
                else:
                    self.failed.append(value)
                self._cond.notify_all()
        return done

    def _produce(self) -> None:
        i = 0
        while not self._stop.is_set():
            futures = []
            for _ in range(BURST):
                value = f"{self.run}-{i}"
                i += 1
                futures.append(self._producer.send(TOPIC, value.encode(), partition=PARTITION,
                                                   on_delivery=self._on_delivery(value)))
            for f in futures:
                try:
                    f.result(timeout=150)       # delivery.timeout.ms (120 s) decides first
                except Exception:               # noqa: BLE001 — counted by the callback
                    pass

    def wait_for(self, predicate, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self), timeout)

    def acked_after(self, t: float) -> float | None:
        with self._cond:
            later = [at for at in self.acked.values() if at > t]
        return min(later) if later else None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(200)
        self._producer.flush(150)
        self._producer.close(30)


async def partition_state(addresses: list[tuple[str, int]], security) -> tuple[int, list[int]]:
    """(leader, isr) of demo-0 as the first answering broker says; (-1, []) if none answers."""
    md = REQUESTS[ApiKey.METADATA]
    for host, port in addresses:
        try:
            with trio.fail_after(5):
                conn = BrokerConnection(host, port, "raftka-demo", security=security)
                await conn.connect()
                try:
                    meta = await conn.request(md(topics=[md.MetadataRequestTopic(name=TOPIC)]), 12)
                finally:
                    await conn.aclose()
            p = next(p for p in meta.topics[0].partitions if p.partition_index == PARTITION)
            return p.leader_id, sorted(p.isr_nodes)
        except Exception:       # noqa: BLE001 — a dead or busy broker: ask the next one
            continue
    return -1, []


async def read_values(address: tuple[str, int], security, prefix: str) -> list[str]:
    """Every value of demo-0 starting with `prefix`, from offset 0 to the high watermark."""
    conn = BrokerConnection(*address, "raftka-demo", security=security)
    await conn.connect()
    values: list[str] = []
    try:
        with trio.fail_after(60):
            await _fetch_all(conn, prefix, values)
    finally:
        await conn.aclose()
    return values


async def _fetch_all(conn, prefix: str, values: list[str]) -> None:
    fr = REQUESTS[ApiKey.FETCH]
    offset, hw = 0, None
    while hw is None or offset < hw:
        got = await conn.request(fr(
            replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=4 << 20,
            topics=[fr.FetchTopic(topic=TOPIC, partitions=[fr.FetchPartition(
                partition=PARTITION, fetch_offset=offset, partition_max_bytes=4 << 20)])]), 12)
        data = got.responses[0].partitions[0]
        if data.error_code:
            raise RuntimeError(f"fetch error {data.error_code}")
        hw = data.high_watermark
        for h in iter_batches(bytes(data.records or b"")):
            for r in decode_batch(h.bytes()).records:
                if r.value is not None and r.value.decode().startswith(prefix):
                    values.append(r.value.decode())
            offset = h.next_offset


def _addresses(bootstrap: str, skip: int | None = None) -> list[tuple[str, int]]:
    out = []
    for i, a in enumerate(bootstrap.split(",")):
        if i != skip:
            host, _, port = a.rpartition(":")
            out.append((host, int(port)))
    return out


def _poll(fn, timeout: float, every: float = 0.2):
    """fn() until it returns something truthy, or None at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got or time.monotonic() > deadline:
            return got or None
        time.sleep(every)


def run_failover(bootstrap: str, security: ClientSecurity, supervisor) -> bool:
    """The kill-the-leader demo; True when every acknowledged record was read exactly once."""
    def state(skip=None):
        return trio.run(partition_state, _addresses(bootstrap, skip), security)
    _supervisors.append(supervisor)
    producer = DemoProducer(bootstrap, security, uuid.uuid4().hex[:8])
    producer.start()
    name = None
    try:
        if not producer.wait_for(lambda p: len(p.acked) >= 50, 60):
            say("failover: the producer got no acknowledgements within 60 s; skipped")
            return False
        # the leader now, not before the producer started: the balancer may have moved it
        leader, _ = state()
        if leader < 0:
            say("failover: demo-0 has no leader; skipped")
            return False
        name = f"broker-{leader}"
        before = len(producer.acked)
        t_kill = time.monotonic()
        say(f"failover: {before} records acknowledged (acks=all); killing the leader of "
            f"demo-0, {name} (SIGKILL)")
        supervisor.command("kill", name)
        supervisor.wait_exit(name, 30)
        new = _poll(lambda: (lambda s: s if s[0] not in (-1, leader) else None)(
            state(leader)), 60)
        first = _poll(lambda: producer.acked_after(t_kill), 90)
        say(f"failover: new leader of demo-0: broker-{new[0]} (ISR {new[1]})" if new
            else "failover: no new leader within 60 s")
        say(f"failover: first acknowledged write {first - t_kill:.2f} s after the kill"
            if first else "failover: no acknowledged write within 90 s of the kill")
        _restart(supervisor, name, leader, state)
        producer.wait_for(lambda p: len(p.acked) >= before + 200, 30)
    finally:
        producer.stop()
        if name is not None and supervisor.status_of(name) == "exited":
            supervisor.command("restart", name)       # never leave the cluster a node short
    return _prove(bootstrap, security, producer)


def _restart(supervisor, name: str, broker_id: int, state) -> None:
    t0 = time.monotonic()
    supervisor.command("restart", name)
    if not supervisor.node(name).ready.wait(90):
        say(f"failover: {name} restarted but not unfenced within 90 s")
        return
    back = _poll(lambda: broker_id in state()[1], 60)
    say(f"failover: {name} restarted; unfenced and back in demo-0's ISR after "
        f"{time.monotonic() - t0:.1f} s" if back else
        f"failover: {name} restarted (unfenced), not yet back in demo-0's ISR after 60 s")


def _read_back(bootstrap: str, security: ClientSecurity, prefix: str,
               timeout: float = 90) -> list[str]:
    """This run's values of demo-0, read from its leader: each broker in turn until one reads it
    all (a leadership move mid-read, e.g. the balancer's preferred leader, means: again)."""
    deadline = time.monotonic() + timeout
    while True:
        for address in _addresses(bootstrap):
            try:
                return trio.run(read_values, address, security, prefix)
            except Exception as exc:      # noqa: BLE001 — not this broker's to answer: next
                err = exc
        if time.monotonic() > deadline:
            raise RuntimeError(f"could not read demo-0 back: {err}")
        time.sleep(0.5)


def _prove(bootstrap: str, security: ClientSecurity, producer: DemoProducer,
           settle_s: float = 30) -> bool:
    """Read demo-0 back to its high watermark until every acknowledged value is there, for up
    to `settle_s`: a leader elected or moved back just before (the balancer's preferred leader)
    learns the high watermark from its followers' next fetches, so a first read can stop short
    of records that all three replicas hold. A record really lost stays missing."""
    acked = set(producer.acked)
    deadline = time.monotonic() + settle_s
    while True:
        try:
            values = _read_back(bootstrap, security, producer.run + "-")
        except RuntimeError as exc:
            say(f"exactly-once check: {exc}")
            return False
        counts = collections.Counter(values)
        missing = len(acked - set(counts))
        if missing == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    duplicated = sum(1 for c in counts.values() if c > 1)
    ok = missing == 0 and duplicated == 0
    say(f"exactly-once check: {len(acked)} acknowledged, {len(values)} read back, "
        f"{missing} missing, {duplicated} duplicated, {len(producer.failed)} failed sends — "
        + ("every acknowledged record is readable exactly once" if ok else "FAILED"))
    return ok
