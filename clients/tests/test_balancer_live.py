"""The balancer, live (issue 19 item 6b): a 3 + 3 cluster with RF 2 and RF 3 topics; self-healing
switched on as `raftka dev` does it (dev_selfheal); a fourth broker joins through `raftka dev
--add-broker 3` while our producer writes with acks=all. The controller moves replicas onto it
until replica counts are within ±1 across the 4 brokers, with no move left in flight and every
partition in sync at its replication factor; `raftka cluster balance --status` then says
"balanced"; every acknowledged record is read back exactly once. Waits are conditions with
deadlines."""

from __future__ import annotations

import json
import signal
import subprocess
import uuid

import pytest
import trio

from clients.admin import AdminClient, NewTopic
from clients.cli import dev_selfheal
from clients.cli.main import main
from clients.producer import Producer
from clients.tests.test_decommission_live import _join, _partitions, _read_all, _true, _until
from common.security import PLAINTEXT
from partition_server.testing import LiveCluster

PARTITIONS = 6


def _status(bootstrap: str, capsys) -> dict:
    capsys.readouterr()
    code = main(["cluster", "balance", "--status", "--output", "json",
                 "--bootstrap-server", bootstrap])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


@pytest.mark.live
async def test_live_balancer_evens_replicas_onto_a_new_broker_under_load(tmp_path, capsys):
    live = LiveCluster(tmp_path / "cluster", brokers=3, spare_brokers=1)
    live.start()
    joiner = None
    try:
        async with AdminClient(live.bootstrap) as admin:
            topics = {f"bal2-{uuid.uuid4().hex[:6]}": 2, f"bal3-{uuid.uuid4().hex[:6]}": 3}
            assert await admin.create_topics([NewTopic(t, PARTITIONS, rf)
                                              for t, rf in topics.items()]) == \
                {t: None for t in topics}

            async def in_sync():
                parts = await _partitions(admin, list(topics))
                return all(sorted(p.isr) == sorted(p.replicas) for p in parts.values())
            await _until(in_sync, 30, "new topics in sync")
            set_now = await dev_selfheal._enable(live.bootstrap, PLAINTEXT, 0)
            assert set_now == dev_selfheal.DEV_DYNAMIC_DEFAULTS
            # a second start keeps what is set
            assert await dev_selfheal._enable(live.bootstrap, PLAINTEXT, 0) == {}
            before = await trio.to_thread.run_sync(_status, live.bootstrap, capsys)
            assert before["enabled"] and before["state"] == "balanced", before

            acked, failed, stop = [], [], trio.Event()
            async with Producer(admin.cluster, {"acks": "all"}) as p:
                async with trio.open_nursery() as n:
                    n.start_soon(_produce, p, list(topics), acked, failed, stop)
                    await _until(lambda: _true(len(acked) >= 200), 30, "the load to start")
                    joiner, joined = _join(live.layout.data_dir, 3)
                    assert await trio.to_thread.run_sync(joined.wait, 60), "3 did not join"
                    parts = await _until(lambda: _even(admin, list(topics)), 120,
                                         "replica counts within ±1 over 4 brokers")
                    settled = len(acked)
                    await _until(lambda: _true(len(acked) > settled + 200), 30, "writes after")
                    stop.set()
            assert not failed, failed[:3]
            for tp, part in parts.items():
                rf = topics[tp.topic]
                assert len(part.replicas) == rf and sorted(part.isr) == sorted(part.replicas)
            after = await trio.to_thread.run_sync(_status, live.bootstrap, capsys)
            assert after["state"] in ("balanced", "leaders"), after
            counts = [b["replicas"] for b in after["brokers"]]
            assert [b["id"] for b in after["brokers"]] == [0, 1, 2, 3]
            assert max(counts) - min(counts) <= 1, after
            capsys.readouterr()
            code = await trio.to_thread.run_sync(main, [
                "cluster", "balance", "--status", "--bootstrap-server", live.bootstrap])
            out = capsys.readouterr().out
            assert code == 0 and out.startswith(("balancer: balanced — ",
                                                 "balancer: leaders — ")), out
            assert "enable=true max.moves=4 threshold=1" in out and "PREFERRED LEADERS" in out
        got = await _read_all(live, list(parts), len(acked))
        for key in acked:
            assert got.count(key) == 1, (key, got.count(key))
    finally:
        if joiner is not None:
            joiner.send_signal(signal.SIGTERM)
            try:
                joiner.wait(60)
            except subprocess.TimeoutExpired:
                joiner.kill()
        live.stop()


async def _produce(p, topics, acked, failed, stop):
    i = 0
    while not stop.is_set():
        key = b"k%d" % i

        def note(m, e, key=key):
            (failed if e is not None else acked).append(e if e is not None else key)
        await p.send(topics[i % len(topics)], b"v%d" % i, key=key, on_delivery=note)
        i += 1
        if i % 20 == 0:
            await trio.sleep(0.01)
    await p.flush()


async def _even(admin, topics):
    """The partitions, once replica counts over brokers 0-3 are within ±1, no move is in
    flight and every partition is in sync; else False."""
    if await admin.list_partition_reassignments():
        return False
    parts = await _partitions(admin, topics)
    counts = [sum(b in p.replicas for p in parts.values()) for b in range(4)]
    if max(counts) - min(counts) > 1:
        return False
    return all(sorted(p.isr) == sorted(p.replicas) for p in parts.values()) and parts


@pytest.mark.live
async def test_live_decommission_with_the_balancer_on(tmp_path, capsys):
    """`raftka dev` runs with the balancer on: decommissioning a broker must not be fought by
    it (a broker being drained receives no replicas). 4 brokers, RF 3: the drain finishes,
    broker 0 is unregistered, and the balancer leaves the 3 others within ±1."""
    with LiveCluster(tmp_path / "cluster", brokers=4) as live:
        async with AdminClient(live.bootstrap) as admin:
            topic = f"baldec-{uuid.uuid4().hex[:6]}"
            assert await admin.create_topics([NewTopic(topic, 8, 3)]) == {topic: None}
            await dev_selfheal._enable(live.bootstrap, PLAINTEXT, 0)

            async def in_sync():
                parts = await _partitions(admin, [topic])
                return all(sorted(p.isr) == sorted(p.replicas) for p in parts.values())
            await _until(in_sync, 30, "the topic in sync")
            code = await trio.to_thread.run_sync(main, [
                "cluster", "decommission", "--broker", "0", "--timeout-s", "90",
                "--bootstrap-server", live.bootstrap])
            out, err = capsys.readouterr()
            assert code == 0, err
            assert "Broker 0 holds no replicas; unregistered." in out, out

            async def settled():
                if await admin.list_partition_reassignments():
                    return False
                parts = await _partitions(admin, [topic])
                counts = [sum(b in p.replicas for p in parts.values()) for b in (1, 2, 3)]
                return all(0 not in p.replicas and len(p.replicas) == 3 and
                           sorted(p.isr) == sorted(p.replicas) for p in parts.values()) \
                    and max(counts) - min(counts) <= 1 and counts
            counts = await _until(settled, 60, "RF 3 on brokers 1-3, counts within ±1")
            assert sum(counts) == 24
            ids = [b["id"] for b in (await admin.describe_cluster())["brokers"]]
            assert ids == [1, 2, 3]
