"""The campaign's consumer-group workload: two members (Raftka's own consumer, whose group
member exposes its generation, which librdkafka keeps to itself) of one classic group read the
keyed topic, recording each record they process with their generation, and commit what they
processed after every poll, recording each commit's window and outcome; at the end one member
fetches the committed offsets. Judged by checkers/groups.py.

A poll during which the member's generation changed is not recorded as processed (its records
may straddle the rebalance; the member would not know which generation to name).
"""

from __future__ import annotations

import threading
import time

from chaos_tests.checkers.groups import GroupCommit, GroupRead
from clients.consumer.sync import SyncConsumer

REFUSED = {"CommitFailedError", "ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID",
           "REBALANCE_IN_PROGRESS", "FENCED_INSTANCE_ID"}


class GroupWorker:
    def __init__(self, bootstrap: str, topic: str, group: str, members: int = 2):
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.reads: list[GroupRead] = []
        self.commits: list[GroupCommit] = []
        self.notes: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._consumers: list[SyncConsumer] = []
        self._threads = [threading.Thread(target=self._member, args=(f"m{i}",), daemon=True,
                                          name=f"campaign-group-m{i}") for i in range(members)]

    def start(self) -> "GroupWorker":
        for t in self._threads:
            t.start()
        return self

    def _consumer(self) -> SyncConsumer:
        c = SyncConsumer(self.bootstrap, {"group.id": self.group, "enable.auto.commit": False,
                                          "auto.offset.reset": "earliest",
                                          "session.timeout.ms": 6000,
                                          "heartbeat.interval.ms": 500})
        c.subscribe([self.topic])
        with self._lock:
            self._consumers.append(c)
        return c

    def _member(self, name: str) -> None:
        c = None
        while not self._stop.is_set():
            try:
                c = c or self._consumer()
                self._round(c, name)
            except Exception as exc:          # noqa: BLE001 - faults make polls fail; go on
                with self._lock:
                    if len(self.notes) < 5:
                        self.notes.append(f"group member {name}: {type(exc).__name__}: {exc}")
                self._stop.wait(0.2)

    def _round(self, c: SyncConsumer, name: str) -> None:
        member = c._consumer.member
        before = member.generation
        records = c.poll(300)
        generation = member.generation
        if not records or generation != before or generation < 0:
            return
        last: dict[int, int] = {}
        with self._lock:
            for r in records:
                self.reads.append(GroupRead(self.group, generation, name, r.partition, r.offset,
                                            time.monotonic()))
                last[r.partition] = max(last.get(r.partition, -1), r.offset)
        start, outcome = time.monotonic(), "ok"
        try:
            c.commit({(self.topic, p): o + 1 for p, o in last.items()})
        except Exception as exc:              # noqa: BLE001 - classified below
            code = getattr(exc, "error_code", None)
            names = {type(exc).__name__, getattr(code, "name", "")}
            outcome = "fail" if names & REFUSED else "unknown"
        with self._lock:
            self.commits += [GroupCommit(self.group, generation, name, p, o + 1, outcome,
                                         time.monotonic(), start=start)
                             for p, o in last.items()]

    def stop(self, partitions: int) -> None:
        """Stop the members; then the committed offsets as the coordinator tells them."""
        self._stop.set()
        for t in self._threads:
            t.join(30)
        from clients.consumer import TopicPartition
        with self._lock:
            consumers = list(self._consumers)
        try:
            if consumers:
                start = time.monotonic()
                got = consumers[0].committed([TopicPartition(self.topic, p)
                                              for p in range(partitions)])
                for tp, offset in got.items():
                    if offset is not None:
                        self.commits.append(GroupCommit(self.group, -1, "fetch", tp.partition,
                                                        offset, "ok", time.monotonic(),
                                                        fetched=True, start=start))
        except Exception as exc:              # noqa: BLE001 - reported, not fatal
            self.notes.append(f"final OffsetFetch: {type(exc).__name__}: {exc}")
        for c in consumers:
            try:
                c.close(commit=False)
            except Exception:                 # noqa: BLE001 - a member broken by a fault
                pass
