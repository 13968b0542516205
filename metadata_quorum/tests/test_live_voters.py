"""Controllers come and go on real processes (issue 19 item 5, KIP-853 on pysyncobj).

1. Three controllers and a broker under metadata write load (topics created through the broker
   in a loop): a fourth controller joins and is added, one of the originals is removed. Every
   acknowledged topic is on every current voter, the voters' metadata streams and images are
   identical, the removed controller stops serving the stream, the broker keeps receiving
   metadata (it sees the topics created after the changes).
2. A controller's disk is lost: SIGKILL it, wipe its directory; an add is refused while it is
   still a voter (no reachable majority of the larger set), as is removing a live voter, adding a
   controller that is not running, and removing an unknown one (through the CLI); remove
   the dead one, start a fresh controller with an empty directory (same id and address) that
   catches up from a Raft snapshot, add it, writes go on; the three images are identical.
3. The active controller dies while a removal is in flight: the next one aborts it.
4. A one-voter quorum grows to three, then survives the loss of its first voter.
Full restarts with the original config files follow 1 and 2.
"""

import json
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest
import trio

from clients.cli import quorum as cli
from clients.cli.dev import DevLayout, ManagedProcess, wait_ready, write_properties
from clients.cli.secure_dev import dev_raft_password
from clients.connection import BrokerConnection, ConnectionClosed
from partition_server.testing import _ports_free, free_base_port
from wire.errors import DecodeError, ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS
from wire.records.batch import decode_batch, iter_batches

pytestmark = pytest.mark.live
NETWORK_ERRORS = (ConnectionClosed, OSError, DecodeError, trio.TooSlowError)


def cid(index: int) -> int:
    return 3000 + index


class Cluster:
    """Controllers by index (id 3000 + index; 3 and 4 join later), and broker 0."""

    def __init__(self, tmp_path, controller_overrides=None):
        while True:
            self.layout = DevLayout(tmp_path, free_base_port(), {
                "default.replication.factor": "1", "min.insync.replicas": "1",
                "offsets.topic.replication.factor": "1"})
            if _ports_free([port for i in (3, 4) for port in (self.layout.controller_port(i),
                                                               self.layout.raft_port(i))]):
                break
        self.extra = controller_overrides or {}
        self.procs: dict[str, ManagedProcess] = {}

    def port(self, index: int) -> int:
        return self.layout.controller_port(index)

    def data_dir(self, index: int):
        return self.layout.data_dir / f"controller-{cid(index)}"

    def start_controller(self, index: int, voter_indexes) -> ManagedProcess:
        lay = self.layout
        props = {
            "node.id": str(cid(index)), "process.roles": "controller",
            "controller.quorum.voters": ",".join(f"{cid(i)}@127.0.0.1:{lay.controller_port(i)}"
                                                 for i in voter_indexes),
            "listeners": f"CONTROLLER://127.0.0.1:{lay.controller_port(index)}",
            "raftka.controller.raft.peers": ",".join(
                f"{cid(i)}@127.0.0.1:{lay.raft_port(i)}"
                for i in sorted(set(voter_indexes) | {index})),
            "metadata.log.dir": str(self.data_dir(index)),
            # a joining controller needs the quorum's password like any other
            "raftka.controller.raft.password": dev_raft_password(lay.data_dir),
        } | self.extra
        path = lay.data_dir / "configs" / f"controller-{cid(index)}.properties"
        write_properties(path, props)
        name = f"controller-{cid(index)}"
        self.procs[name] = ManagedProcess(
            name, [sys.executable, "-m", "metadata_quorum", "--config", str(path)],
            "listening on", True, lay.log_path(name))
        return self.procs[name]

    def start_broker(self) -> ManagedProcess:
        path = self.layout.data_dir / "configs" / "broker-0.properties"
        write_properties(path, self.layout.broker_properties(0))
        self.procs["broker-0"] = ManagedProcess(
            "broker-0", [sys.executable, "-m", "partition_server", "--config", str(path)],
            "unfenced", True, self.layout.log_path("broker-0"))
        return self.procs["broker-0"]

    def stop(self, name: str, sig=signal.SIGTERM) -> None:
        p = self.procs.pop(name)
        p.proc.send_signal(sig)
        p.proc.wait(30)

    def logs_say(self, text: str) -> list[str]:
        """Controller log lines (every run of every controller) containing `text`."""
        return [line for path in (self.layout.data_dir / "logs").glob("controller-*.log")
                for line in path.read_text().splitlines() if text in line]

    def stop_all(self) -> None:
        for name in sorted(self.procs, key=lambda n: not n.startswith("broker")):
            self.procs[name].proc.send_signal(signal.SIGKILL)
            self.procs[name].proc.wait(30)
        self.procs.clear()


async def request(port: int, message, version: int, timeout=5.0):
    conn = BrokerConnection("127.0.0.1", port)
    try:
        await conn.connect(timeout_s=timeout)
        return await conn.request(message, version, timeout_s=timeout)
    finally:
        await conn.aclose()


async def until(check, what: str, timeout_s: float = 30.0, pause: float = 0.2):
    """Await `check()` until it returns a truthy value; network errors count as not yet."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            result = await check()
            if result:
                return result
        except NETWORK_ERRORS:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        await trio.sleep(pause)


class Load:
    """Topics created in a loop through the broker (forwarded to the active controller)."""

    def __init__(self, port: int, prefix: str):
        self.port, self.prefix = port, prefix
        self.acked: list[str] = []
        self.failed = 0
        self.stop = trio.Event()

    async def create(self, name: str) -> int:
        ct = REQUESTS[ApiKey.CREATE_TOPICS]
        msg = ct(topics=[ct.CreatableTopic(name=name, num_partitions=1, replication_factor=1)],
                 timeout_ms=5000)
        try:
            resp = await request(self.port, msg, 7, timeout=10)
        except NETWORK_ERRORS:
            return -1
        return resp.topics[0].error_code

    async def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            name = f"{self.prefix}-{n}"
            n += 1
            if await self.create(name) == 0:
                self.acked.append(name)
            else:
                self.failed += 1
                await trio.sleep(0.1)


async def stream(port: int) -> tuple[list[bytes], int]:
    """Every record value of a controller's metadata stream from offset 0, and its end."""
    f = REQUESTS[ApiKey.FETCH]
    offset, values = 0, []
    while True:
        resp = await request(port, f(replica_id=99, max_wait_ms=0, topics=[f.FetchTopic(
            topic="__cluster_metadata", partitions=[f.FetchPartition(
                partition=0, fetch_offset=offset)])]), 12)
        part = resp.responses[0].partitions[0]
        assert part.error_code == 0, ErrorCode(part.error_code).name
        assert part.snapshot_id.end_offset < 0, "the stream no longer starts at offset 0"
        data = bytes(part.records or b"")
        if not data:
            return values, part.high_watermark
        for h in iter_batches(data):
            for rec in decode_batch(h.bytes()).records:
                assert rec.offset == offset
                values.append(bytes(rec.value))
                offset += 1


async def image_records(port: int) -> tuple[int, list[bytes]]:
    """A controller's image as FetchSnapshot returns it (records at its end offset)."""
    fs = REQUESTS[ApiKey.FETCH_SNAPSHOT]
    resp = await request(port, fs(replica_id=99, max_bytes=64 << 20, topics=[fs.TopicSnapshot(
        name="__cluster_metadata", partitions=[fs.PartitionSnapshot(partition=0)])]), 1)
    part = resp.topics[0].partitions[0]
    values = [bytes(r.value) for h in iter_batches(bytes(part.unaligned_records or b""))
              for r in decode_batch(h.bytes()).records]
    return part.snapshot_id.end_offset, values


async def identical_voters(ports: list[int], full_stream: bool) -> tuple[int, list[bytes]]:
    """Wait until every voter is at the same offset with the same image (and the same stream
    from offset 0 when `full_stream`); returns (end offset, image records)."""
    async def same():
        images = [await image_records(p) for p in ports]
        if len({end for end, _ in images}) != 1 or any(i != images[0] for i in images):
            return None
        if full_stream:
            streams = [await stream(p) for p in ports]
            if any(s != streams[0] for s in streams):
                return None
        return images[0]
    return await until(same, f"identical images on {ports}", 30)


async def broker_topics(port: int) -> set[str]:
    md = REQUESTS[ApiKey.METADATA]
    resp = await request(port, md(topics=None), 12)
    return {t.name for t in resp.topics}


def names_in(values: list[bytes]) -> set[str]:
    from metadata_quorum.records import TopicRecord, decode_record
    return {r.name for r in map(decode_record, values) if isinstance(r, TopicRecord)}


async def _join_a_fourth_then_remove_an_original(c: Cluster, load: Load, boot):
    """While `load` writes (run by the caller): controller 3 joins, is added and catches up,
    then an original that is not the active controller is removed; waits for 5 more
    acknowledged writes after the changes. Returns (removed index, voter indexes)."""
    await until(lambda: _value(len(load.acked) >= 5), "first writes", 30)
    # a fourth controller joins: it knows the voters, waits until added
    assert wait_ready([c.start_controller(3, [0, 1, 2])], 30) is None
    t0 = time.monotonic()
    await cli.add_controller(boot, cid(3), ("127.0.0.1", c.port(3)),
                             ("127.0.0.1", c.layout.raft_port(3)))
    t1 = time.monotonic()
    await cli.wait_caught_up(boot, cid(3), 30)
    t2 = time.monotonic()
    acked_at_add = len(load.acked)
    # remove an original that is not the active controller
    leader = (await cli.describe("127.0.0.1", c.port(3)))["leader_id"]
    gone = next(i for i in range(3) if cid(i) != leader)
    await cli.remove_controller(boot, cid(gone))
    print(f"add {t1 - t0:.2f} s, caught up {t2 - t1:.2f} s later, remove "
          f"{time.monotonic() - t2:.2f} s (load {load_average()})")
    voters = [i for i in range(4) if i != gone]
    await until(lambda: _value(len(load.acked) >= acked_at_add + 5),
                "writes after the changes", 30)
    return gone, voters


async def _check_after_the_removal(c: Cluster, load: Load, broker_port: int, gone: int, voters):
    """The removed controller stops serving the stream (then it is stopped); the voter set is
    the new one; the voters are identical and hold every acknowledged topic; so does the
    broker."""
    # the removed controller no longer serves brokers
    f = REQUESTS[ApiKey.FETCH]
    resp = await request(c.port(gone), f(replica_id=99, max_wait_ms=0, topics=[
        f.FetchTopic(topic="__cluster_metadata", partitions=[f.FetchPartition(
            partition=0, fetch_offset=0)])]), 12)
    assert resp.responses[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    c.stop(f"controller-{cid(gone)}")
    status = await cli.describe("127.0.0.1", c.port(voters[0]))
    assert sorted(v["id"] for v in status["voters"]) == sorted(cid(i) for i in voters)
    assert {v["endpoint"] for v in status["voters"]} == \
        {f"127.0.0.1:{c.port(i)}" for i in voters}
    end, image = await identical_voters([c.port(i) for i in voters], full_stream=True)
    assert set(load.acked) <= names_in(image), "an acknowledged topic is missing"
    # the broker still follows the stream: it has every acknowledged topic
    await until(lambda: _has(broker_port, load.acked), "broker has every topic", 30)


async def _the_active_controller_leaves(c: Cluster, load: Load, broker_port: int, voters):
    """The active controller itself is removed (it hands leadership over first), then writes go
    on and voters and broker agree. Returns the remaining voter indexes."""
    # the active controller itself can leave: it hands leadership over first
    leader = (await cli.describe("127.0.0.1", c.port(voters[0])))["leader_id"]
    # (through the broker, which forwards RemoveRaftVoter to the active controller)
    await cli.remove_controller(("127.0.0.1", broker_port), leader, timeout_s=30,
                                via_broker=True)
    c.stop(f"controller-{leader}")
    voters = [i for i in voters if cid(i) != leader]
    assert (await cli.describe("127.0.0.1", c.port(voters[0])))["leader_id"] != leader
    assert await load.create("after-leader-left") == 0
    load.acked.append("after-leader-left")
    end, image = await identical_voters([c.port(i) for i in voters], full_stream=True)
    assert set(load.acked) <= names_in(image)
    await until(lambda: _has(broker_port, load.acked), "broker has every topic", 30)
    status = await cli.describe("127.0.0.1", c.port(voters[0]))
    assert sorted(v["id"] for v in status["voters"]) == sorted(cid(i) for i in voters)
    return voters


async def _check_after_a_full_restart(c: Cluster, load: Load, broker_port: int, voters):
    """A full restart with the original (now stale) config files: each voter rebuilds its
    membership from its Raft journal, the quorum elects and commits. Returns (metadata end
    offset, quorum status)."""
    await restart_voters(c, voters)
    assert await load.create("after-restart") == 0
    load.acked.append("after-restart")
    end, image = await identical_voters([c.port(i) for i in voters], full_stream=True)
    assert set(load.acked) <= names_in(image)
    status = await cli.describe("127.0.0.1", c.port(voters[0]))
    assert sorted(v["id"] for v in status["voters"]) == sorted(cid(i) for i in voters)
    await until(lambda: _has(broker_port, load.acked), "broker has every topic", 30)
    return end, status


def test_add_and_remove_controllers_under_metadata_load(tmp_path):
    c = Cluster(tmp_path)
    try:
        for i in range(3):
            c.start_controller(i, [0, 1, 2])
        assert wait_ready(list(c.procs.values()), 30) is None
        assert wait_ready([c.start_broker()], 40) is None
        broker_port = c.layout.broker_port(0)
        boot = ("127.0.0.1", c.port(0))

        async def scenario():
            load = Load(broker_port, "t")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(load.run)
                gone, voters = await _join_a_fourth_then_remove_an_original(c, load, boot)
                load.stop.set()
            await _check_after_the_removal(c, load, broker_port, gone, voters)
            voters = await _the_active_controller_leaves(c, load, broker_port, voters)
            # a full restart with the original (now stale) config files: each voter rebuilds
            # its membership from its Raft journal, the quorum elects and commits
            end, status = await _check_after_a_full_restart(c, load, broker_port, voters)
            return len(load.acked), load.failed, end, status
        acked, failed, end, status = trio.run(scenario)
        assert not c.logs_say("differs from the voter set")
        print(f"acknowledged {acked} topics ({failed} failed attempts), metadata end {end}, "
              f"quorum {status}")
    finally:
        c.stop_all()


async def raftka(*args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "clients.cli.main", "quorum", *args]
    return await trio.to_thread.run_sync(lambda: subprocess.run(
        argv, capture_output=True, text=True, timeout=90))


def load_average() -> str:
    import os
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


async def restart_voters(c: Cluster, voters, first_config=None) -> None:
    """SIGTERM every voter, start each again with the voter list it was first started with
    (`first_config`: index → voter indexes; the original three by default)."""
    first_config = first_config or {}
    for i in voters:
        c.stop(f"controller-{cid(i)}")
    for i in voters:
        c.start_controller(i, first_config.get(i, [0, 1, 2]))
    assert wait_ready([c.procs[f"controller-{cid(i)}"] for i in voters], 30) is None


async def _value(value):
    return value


async def _has(port: int, names) -> bool:
    return set(names) <= await broker_topics(port)


async def _create_ten(load: Load, prefix: str) -> None:
    """Ten topics `prefix`-0..9 through the broker, each acknowledged."""
    for n in range(10):
        assert await load.create(f"{prefix}-{n}") == 0
        load.acked.append(f"{prefix}-{n}")


async def _refused_while_the_dead_one_is_a_voter(c: Cluster, boot, leader: int, live) -> None:
    """While the dead one is a voter: no add (2 reachable of a 4-voter set), and no removal of
    a live voter (1 reachable of the 2 left); a voter that is not running is not added either;
    an unknown voter is not found."""
    with pytest.raises(cli.QuorumError, match="REQUEST_TIMED_OUT.*does not answer"):
        await cli.add_controller(boot, cid(3), ("127.0.0.1", c.port(3)),
                                 ("127.0.0.1", c.layout.raft_port(3)), timeout_s=20)
    assert wait_ready([c.start_controller(3, range(3))], 30) is None
    with pytest.raises(cli.QuorumError, match="INVALID_REQUEST.*remove the unreachable"):
        await cli.add_controller(boot, cid(3), ("127.0.0.1", c.port(3)),
                                 ("127.0.0.1", c.layout.raft_port(3)), timeout_s=20)
    c.stop(f"controller-{cid(3)}")
    other = next(i for i in live if cid(i) != leader)
    with pytest.raises(cli.QuorumError, match="INVALID_REQUEST.*below a majority"):
        await cli.remove_controller(boot, cid(other), timeout_s=20)
    with pytest.raises(cli.QuorumError, match="VOTER_NOT_FOUND"):
        await cli.remove_controller(boot, 4242, timeout_s=20)


async def _cli_removes_the_dead_one(ctl: str, dead: int) -> None:
    """The CLI, as a user runs it: a refusal is one line with Kafka's error, exit 1; then the
    dead controller is removed."""
    out = await raftka("remove-controller", "--bootstrap-controller", ctl,
                       "--controller-id", "4242")
    assert out.returncode == 1 and "VOTER_NOT_FOUND" in out.stderr, out
    out = await raftka("remove-controller", "--bootstrap-controller", ctl,
                       "--controller-id", str(cid(dead)))
    assert out.returncode == 0 and f"controller {cid(dead)} removed" in out.stdout, out


async def _fresh_controller_joins(c: Cluster, dead: int, live, ctl: str, broker_port: int):
    """A fresh controller, empty directory, same id and address, joins the two voters through
    the CLI; it is a voter again (the broker an observer) and loaded a Raft snapshot."""
    assert not c.data_dir(dead).exists()
    assert wait_ready([c.start_controller(dead, live)], 30) is None
    config = c.layout.data_dir / "configs" / f"controller-{cid(dead)}.properties"
    out = await raftka("add-controller", "--bootstrap-controller", ctl,
                       "--command-config", str(config), "--timeout-ms", "30000")
    assert out.returncode == 0 and "caught up with the leader" in out.stdout, out
    out = await raftka("describe", "--bootstrap-server", f"127.0.0.1:{broker_port}",
                       "--output", "json")
    status = json.loads(out.stdout)
    assert sorted(v["id"] for v in status["voters"]) == [cid(i) for i in range(3)]
    assert 0 in [o["id"] for o in status["observers"]]
    log = c.layout.log_path(f"controller-{cid(dead)}").read_text()
    assert "metadata state loaded from a Raft snapshot" in log


def test_replace_a_controller_whose_disk_is_lost(tmp_path):
    # compaction every 2 s: the replacement catches up from a Raft snapshot, not the whole log
    c = Cluster(tmp_path, {"raftka.controller.raft.log.compaction.min.time.ms": "2000"})
    try:
        for i in range(3):
            c.start_controller(i, [0, 1, 2])
        assert wait_ready(list(c.procs.values()), 30) is None
        assert wait_ready([c.start_broker()], 40) is None
        broker_port = c.layout.broker_port(0)

        async def scenario():
            load = Load(broker_port, "r")
            await _create_ten(load, "before")
            leader = (await cli.describe("127.0.0.1", c.port(0)))["leader_id"]
            dead = next(i for i in range(3) if cid(i) != leader)
            live = [i for i in range(3) if i != dead]
            boot = ("127.0.0.1", c.port(live[0]))
            c.stop(f"controller-{cid(dead)}", signal.SIGKILL)
            shutil.rmtree(c.data_dir(dead))
            await _refused_while_the_dead_one_is_a_voter(c, boot, leader, live)
            ctl = f"127.0.0.1:{c.port(live[0])}"
            await _cli_removes_the_dead_one(ctl, dead)
            await _create_ten(load, "between")
            await trio.sleep(2.5)      # past a compaction interval: the log now starts later
            await _fresh_controller_joins(c, dead, live, ctl, broker_port)
            await _create_ten(load, "after")
            end, image = await identical_voters([c.port(i) for i in range(3)], full_stream=False)
            assert set(load.acked) <= names_in(image)
            # a full restart: membership comes back from each voter's Raft snapshot + journal
            await restart_voters(c, range(3), {dead: live})
            assert await load.create("after-restart") == 0
            load.acked.append("after-restart")
            end, image = await identical_voters([c.port(i) for i in range(3)], full_stream=False)
            assert set(load.acked) <= names_in(image)
            await until(lambda: _has(broker_port, load.acked), "broker has every topic", 30)
            return end
        end = trio.run(scenario)
        assert not c.logs_say("differs from the voter set")
        print(f"metadata end offset {end}")
    finally:
        c.stop_all()


async def voters_record(port: int):
    """The VotersRecord of a controller's image (None before any change)."""
    from metadata_quorum.records import VotersRecord, decode_record
    _, values = await image_records(port)
    return next((x for x in map(decode_record, values) if isinstance(x, VotersRecord)), None)


def test_active_controller_dies_in_the_middle_of_a_voter_change(tmp_path):
    """A removal is in flight (its PENDING record committed; a test pause holds the active
    controller before the Raft membership entry) when the active controller is SIGKILLed: the
    next active controller ends the change (aborted: the membership entry was never proposed),
    the voter being removed serves brokers again, and the next change is accepted."""
    c = Cluster(tmp_path, {"raftka.controller.test.voter.change.pause.ms": "6000"})
    try:
        for i in range(3):
            c.start_controller(i, [0, 1, 2])
        assert wait_ready(list(c.procs.values()), 30) is None

        async def scenario():
            async def elected():
                leader_id = (await cli.describe("127.0.0.1", c.port(0)))["leader_id"]
                return leader_id if leader_id >= 0 else None
            leader = await until(elected, "a leader", 30)
            lead = leader - 3000
            target, survivor = [i for i in range(3) if i != lead]
            remove = REQUESTS[ApiKey.REMOVE_RAFT_VOTER](voter_id=cid(target))
            async with trio.open_nursery() as nursery:
                async def send():
                    try:            # NOT_CONTROLLER: it leads Raft but is not active yet
                        while (await request(c.port(lead), remove, 0, timeout=30)).error_code \
                                == ErrorCode.NOT_CONTROLLER:
                            await trio.sleep(0.1)
                    except NETWORK_ERRORS:
                        pass                # the controller it was sent to is killed
                nursery.start_soon(send)

                async def in_flight():
                    rec = await voters_record(c.port(survivor))
                    return rec is not None and rec.change == ("remove", cid(target))
                await until(in_flight, "the removal in flight", 20)
                c.stop(f"controller-{leader}", signal.SIGKILL)

            async def ended():
                rec = await voters_record(c.port(survivor))
                return rec if rec is not None and rec.change == () else None
            rec = await until(ended, "the change ended by the next active controller", 30)
            assert sorted(v[0] for v in rec.voters) == [cid(i) for i in range(3)]
            # the voter that was being removed serves the stream again; the two agree
            await identical_voters([c.port(target), c.port(survivor)], full_stream=True)
            # the next change is accepted: the dead controller leaves (no pause for this
            # removal's window: nothing waits on the dead voter, which is unreachable)
            await cli.remove_controller(("127.0.0.1", c.port(survivor)), leader, timeout_s=60)
            # answered once committed on the active controller, which may be `target`: the
            # survivor applies it with the next AppendEntries (a full suite's load once read
            # it a moment before)
            async def removed():
                rec = await voters_record(c.port(survivor))
                return sorted(v[0] for v in rec.voters) == sorted([cid(target), cid(survivor)])
            await until(removed, "the dead controller out of the survivor's voter set", 10)
        trio.run(scenario)
        assert not c.logs_say("differs from the voter set")
    finally:
        c.stop_all()


def test_a_one_voter_quorum_grows_to_three(tmp_path):
    """One controller alone, then a second and a third added: the step from one to two voters
    is the one pysyncobj cannot make without commits waiting for the newcomer (allowed)."""
    c = Cluster(tmp_path)
    try:
        assert wait_ready([c.start_controller(0, [0])], 30) is None

        async def scenario():
            boot = ("127.0.0.1", c.port(0))
            for i in (1, 2):
                assert wait_ready([c.start_controller(i, list(range(i)))], 30) is None
                await cli.add_controller(boot, cid(i), ("127.0.0.1", c.port(i)),
                                         ("127.0.0.1", c.layout.raft_port(i)), timeout_s=30)
                await cli.wait_caught_up(boot, cid(i), 30)
            status = await cli.describe("127.0.0.1", c.port(2))
            assert sorted(v["id"] for v in status["voters"]) == [cid(i) for i in range(3)]
            # the first voter can now fail: the two others elect and commit (a broker
            # registration is a committed RegisterBrokerRecord)
            c.stop(f"controller-{cid(0)}", signal.SIGKILL)
            br = REQUESTS[ApiKey.BROKER_REGISTRATION]
            msg = br(broker_id=7, cluster_id="raftka", incarnation_id=uuid.uuid4(),
                     listeners=[br.Listener(name="PLAINTEXT", host="127.0.0.1", port=1)])

            async def registered():
                for i in (1, 2):
                    if (await request(c.port(i), msg, 4)).error_code == 0:
                        return True
            await until(registered, "a registration committed by the two", 30)
            end, image = await identical_voters([c.port(1), c.port(2)], full_stream=True)
            from metadata_quorum.records import RegisterBrokerRecord, decode_record
            assert any(isinstance(x, RegisterBrokerRecord) and x.broker_id == 7
                       for x in map(decode_record, image))
        trio.run(scenario)
        assert not c.logs_say("differs from the voter set")
    finally:
        c.stop_all()
