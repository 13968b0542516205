"""Durable metadata (issue 20 item 4), live: three controller processes on 127.0.0.1.

Power loss: each controller records, after every fsync of its Raft journal, the journal's length
on disk (`raftka.controller.test.raft.sync.record`); a "power loss" is SIGKILL and then cutting
the journal back to that length (its term/vote file and snapshot are only ever replaced by a
synced rename, so what is on disk is what a power loss leaves). A wiped disk: the metadata
directory is deleted.
"""

import json
import os
import shutil
import time

import pytest
import trio

from clients.cli.dev import CONTROLLER_IDS
from clients.connection import ConnectionClosed
from metadata_quorum.tests.test_failover import (Quorum, _request, create_topic, register_broker,
                                                  topics_in_stream)
from wire.errors import DecodeError
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

pytestmark = pytest.mark.live

NETWORK_ERRORS = (ConnectionClosed, OSError, DecodeError, trio.TooSlowError)


async def try_create(port: int, name: str) -> bool:
    """One CreateTopics to one controller: True only if it answered that the topic committed."""
    ct = REQUESTS[ApiKey.CREATE_TOPICS]
    msg = ct(topics=[ct.CreatableTopic(name=name, num_partitions=-1, replication_factor=-1,
                                       assignments=[ct.CreatableReplicaAssignment(
                                           partition_index=0, broker_ids=[0])])],
             timeout_ms=5000)
    try:
        resp = await _request(port, msg, 7, timeout=6)
    except NETWORK_ERRORS:
        return False
    return resp.topics[0].error_code == 0


async def stream_has(q: Quorum, index: int, names: list[str], deadline_s: float) -> list[str]:
    """The topics of controller `index`'s committed stream once it holds all of `names`."""
    deadline = time.monotonic() + deadline_s
    got = []
    while time.monotonic() < deadline:
        try:
            got, _ = await topics_in_stream(q.port(index))
            if set(names) <= set(got):
                return got
        except NETWORK_ERRORS:
            pass
        await trio.sleep(0.1)
    missing = sorted(set(names) - set(got))
    raise AssertionError(f"controller {index} lacks {len(missing)} acknowledged topics: "
                         f"{missing[:10]}")


async def known_directories(q: Quorum, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    metas = [q.layout.data_dir / f"controller-{cid}" / "raft.log.meta" for cid in CONTROLLER_IDS]
    while time.monotonic() < deadline:
        try:
            known = [json.loads(m.read_text()) for m in metas]
            if all(len(set(k.get("peer_directories", {}).values()) - {k["directory_id"]}) == 2
                   for k in known):
                return
        except (OSError, ValueError):
            pass                                # replaced while read: look again
        await trio.sleep(0.1)
    raise AssertionError("the controllers did not learn each other's directory ids")


def power_loss(q: Quorum, index: int) -> int:
    """SIGKILL, then drop what the journal had not fsynced; returns the bytes dropped."""
    q.kill(index)
    path = q.layout.data_dir / f"controller-{CONTROLLER_IDS[index]}" / "raft.log"
    synced, inode = map(int, (path.parent / "raft.log.synced").read_text().split())
    size = os.path.getsize(path)
    if inode != os.stat(path).st_ino:
        # killed between a rewrite (compaction: the new file fsynced, then renamed over the
        # old) and its record: the file holds only what was written and synced before the
        # rename, nothing unsynced to drop
        return 0
    assert synced <= size
    os.truncate(path, synced)
    return size - synced


def test_power_loss_of_a_majority_loses_no_committed_entry(tmp_path):
    # compaction every 40 entries: snapshots are written (and replace journal entries) during
    # the run, so the power loss also meets snapshots and rewritten journals
    q = Quorum(tmp_path, {"raftka.controller.test.raft.sync.record": "true",
                          "raftka.controller.raft.log.compaction.min.entries": "40"})
    q.start_all()
    try:
        async def scenario():
            await register_broker(q)
            active, _ = await create_topic(q, "first", 20)
            acked = ["first"]
            port = q.port(active)
            stop = trio.Event()

            async def writer(w: int):
                n = 0
                while not stop.is_set():
                    name = f"w{w}-{n}"
                    n += 1
                    if await try_create(port, name):
                        acked.append(name)
                    elif stop.is_set():
                        return
            async with trio.open_nursery() as nursery:
                for w in range(6):           # concurrent writers: many entries per fsync
                    nursery.start_soon(writer, w)
                while len(acked) < 150:
                    await trio.sleep(0.01)
                # the active controller and one follower lose power with writes in flight
                follower = next(i for i in range(3) if i != active)
                dropped = [power_loss(q, active), power_loss(q, follower)]
                stop.set()
            dumps = sum((q.layout.data_dir / f"controller-{cid}" / "raft.dump").exists()
                        for cid in CONTROLLER_IDS)
            print(f"acknowledged {len(acked)} topics; unsynced journal bytes dropped: {dropped}; "
                  f"controllers with a snapshot: {dumps}")
            for i in (active, follower):
                q.start(i)
            await create_topic(q, "after", 30)
            for i in range(3):
                got = await stream_has(q, i, acked + ["after"], 30)
                assert len(got) == len(set(got)), "a topic committed twice"
        trio.run(scenario)
    finally:
        q.stop_all()


def test_a_wiped_controller_cannot_elect_a_leader_missing_committed_entries(tmp_path):
    """B is down while A and C commit; then A is down and C's disk is wiped. B and the empty C
    are a majority by count, and C's empty log would let it vote for B, which lacks what A and C
    committed: without directory ids B would lead and those entries would be lost. With them, B
    ignores C's vote, nothing commits until A is back, and A's entries survive; C then catches
    up, is re-admitted, and counts again."""
    q = Quorum(tmp_path)
    q.start_all()
    try:
        async def scenario():
            await register_broker(q)
            await create_topic(q, "before", 20)
            # every controller knows its peers' directory ids (first-hand or from the leader's
            # log entry): a peer wiped before that is the documented limit (trust on first use)
            await known_directories(q, 20)
            b = 1
            q.kill(b)
            committed = []
            for n in range(5):
                await create_topic(q, f"while-b-down-{n}", 20)
                committed.append(f"while-b-down-{n}")
            a, c = [i for i in range(3) if i != b]
            for i in (a, c):
                await stream_has(q, i, committed, 20)
            q.kill(a)
            q.kill(c)
            shutil.rmtree(q.layout.data_dir / f"controller-{CONTROLLER_IDS[c]}")
            q.start(c)
            q.start(b)
            # B and the wiped C: no leader may form, so no write is accepted
            deadline = time.monotonic() + 6
            attempt = 0
            while time.monotonic() < deadline:
                for i in (b, c):
                    assert not await try_create(q.port(i), f"must-not-commit-{attempt}"), \
                        "B and a wiped C elected a leader"
                    attempt += 1
                await trio.sleep(0.2)
            q.start(a)
            await create_topic(q, "after-a-returns", 30)
            for i in range(3):
                got = await stream_has(q, i, ["before", *committed, "after-a-returns"], 30)
                assert not any(n.startswith("must-not-commit") for n in got)
            # C was re-admitted: with B down again, A and C commit on their own
            q.kill(b)
            await create_topic(q, "c-counts-again", 30)
            await stream_has(q, c, ["c-counts-again"], 20)
        trio.run(scenario)
    finally:
        q.stop_all()
