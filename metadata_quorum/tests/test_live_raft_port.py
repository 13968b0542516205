"""The Raft port is safe by default (issue 20 item 6), on real controller processes.

pysyncobj exchanges pickles on the Raft port; the shared password (Fernet: HMAC checked before
anything is decrypted or unpickled) is its only protection.

1. Three controllers; a raw TCP client sends each Raft port a pickle that would create a marker
   file when unpickled: framed as pysyncobj frames it without a password, and encrypted with a
   wrong one. Nothing is decoded (no marker), each controller closes the connection and logs
   it, the quorum keeps committing. Control: the same pickle encrypted with the right password
   *is* decoded (the marker appears), so the refusals are the password's doing, not bad framing.
2. Seeded fuzz: a few hundred connections of random bytes (random lengths, plausible and absurd
   length prefixes, base64 tokens with bad HMACs, truncated frames) at the Raft ports; every
   controller is alive, pysyncobj's tick never failed, and the quorum commits.
3. A controller given another password is kept out; it and the others log why.
4. What a stranger costs before authenticating is bounded: 100 idle connections to one Raft port
   are all closed (those beyond 8 from one host at once, at once; the rest when their time to
   authenticate is up), a 2 GiB length prefix followed by megabytes is cut off, and the quorum
   commits throughout.
5. Exact binding: controllers on 127.0.0.11, .12 and .13, all on the *same* Raft and listener
   ports (impossible while pysyncobj bound 0.0.0.0); they elect and commit, and nothing listens
   on 127.0.0.1 at that port.
"""

from __future__ import annotations

import base64
import os
import pickle
import random
import select
import signal
import socket
import struct
import sys
import time
import zlib
from pathlib import Path

import pytest
import trio

from clients.cli.dev import ManagedProcess, wait_ready, write_properties
from clients.cli.secure_dev import dev_raft_password
from clients.connection import BrokerConnection, ConnectionClosed
from partition_server.testing import free_base_port, port_range
from wire.errors import DecodeError, ErrorCode
from wire.messages.api_keys import ApiKey
from wire.messages.index_generated import REQUESTS

pytestmark = pytest.mark.live
NETWORK_ERRORS = (ConnectionClosed, OSError, DecodeError, trio.TooSlowError)
IDS = (3000, 3001, 3002)
FUZZ_CASES = 300
DROP_LINE = "Raft port: dropped the connection from"


class Quorum:
    """Three controllers (no brokers) at `hosts`, listener and Raft ports per index."""

    def __init__(self, data_dir: Path, hosts, listener_ports, raft_ports, passwords=None):
        self.data_dir, self.hosts = data_dir, list(hosts)
        self.listener_ports, self.raft_ports = list(listener_ports), list(raft_ports)
        self.password = dev_raft_password(data_dir)
        self.passwords = passwords or [self.password] * 3
        self.procs: list[ManagedProcess] = []

    def start(self) -> "Quorum":
        voters = ",".join(f"{c}@{h}:{p}" for c, h, p in zip(IDS, self.hosts, self.listener_ports))
        peers = ",".join(f"{c}@{h}:{p}" for c, h, p in zip(IDS, self.hosts, self.raft_ports))
        for i, cid in enumerate(IDS):
            path = self.data_dir / "configs" / f"controller-{cid}.properties"
            write_properties(path, {
                "node.id": str(cid), "process.roles": "controller",
                "controller.quorum.voters": voters,
                "listeners": f"CONTROLLER://{self.hosts[i]}:{self.listener_ports[i]}",
                "raftka.controller.raft.peers": peers,
                "raftka.controller.raft.password": self.passwords[i],
                "metadata.log.dir": str(self.data_dir / f"controller-{cid}")})
            self.procs.append(ManagedProcess(
                f"controller-{cid}", [sys.executable, "-m", "metadata_quorum", "--config",
                                      str(path)], "listening on", True, self.log_path(cid)))
        problem = wait_ready(self.procs, 60)
        assert problem is None, problem
        return self

    def log_path(self, cid: int) -> Path:
        return self.data_dir / "logs" / f"controller-{cid}.log"

    def log_lines(self, cid: int, text: str) -> list[str]:
        return [x for x in self.log_path(cid).read_text().splitlines() if text in x]

    def alive(self) -> list[bool]:
        return [p.proc.poll() is None for p in self.procs]

    def stop(self) -> None:
        for p in self.procs:
            if p.proc.poll() is None:
                p.proc.send_signal(signal.SIGKILL)
                p.proc.wait(30)

    async def request(self, i: int, message, version: int):
        conn = BrokerConnection(self.hosts[i], self.listener_ports[i])
        try:
            await conn.connect(timeout_s=5)
            return await conn.request(message, version, timeout_s=10)
        finally:
            await conn.aclose()

    async def commit(self, tag: str, timeout_s: float = 30, among=range(3)) -> None:
        """Commit one ACL through whichever controller is active (the others: NOT_CONTROLLER)."""
        ca = REQUESTS[ApiKey.CREATE_ACLS]
        msg = ca(creations=[ca.AclCreation(resource_type=2, resource_name=f"t-{tag}",
                                           resource_pattern_type=3, principal=f"User:{tag}",
                                           host="*", operation=3, permission_type=3)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for i in among:
                try:
                    resp = await self.request(i, msg, 2)
                except NETWORK_ERRORS:
                    continue
                if resp.results[0].error_code == 0:
                    return
            await trio.sleep(0.2)
        raise AssertionError(f"no controller committed {tag} within {timeout_s}s")

    async def end(self, i: int) -> int:
        f = REQUESTS[ApiKey.FETCH]
        msg = f(replica_id=99, max_wait_ms=0, topics=[f.FetchTopic(
            topic="__cluster_metadata", partitions=[f.FetchPartition(partition=0,
                                                                     fetch_offset=0)])])
        return (await self.request(i, msg, 12)).responses[0].partitions[0].high_watermark

    async def same_end(self, timeout_s: float = 30) -> int:
        """Wait until the three controllers' metadata streams end at the same offset."""
        f = REQUESTS[ApiKey.FETCH]
        msg = f(replica_id=99, max_wait_ms=0, topics=[f.FetchTopic(
            topic="__cluster_metadata", partitions=[f.FetchPartition(partition=0,
                                                                     fetch_offset=0)])])
        deadline = time.monotonic() + timeout_s
        ends: list = []
        while time.monotonic() < deadline:
            try:
                ends = [(await self.request(i, msg, 12)).responses[0].partitions[0].high_watermark
                        for i in range(3)]
                if len(set(ends)) == 1 and ends[0] > 0:
                    return ends[0]
            except NETWORK_ERRORS:
                pass
            await trio.sleep(0.2)
        raise AssertionError(f"controllers' metadata ends differ: {ends}")


class Marker:
    """Unpickling this creates `path` (any unpickler that runs it has executed our code)."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def frame(token: bytes) -> bytes:
    return struct.pack("i", len(token)) + token


def fernet(password: str):
    from pysyncobj.encryptor import getEncryptor
    return getEncryptor(password)


def send_and_see_closed(host: str, port: int, data: bytes, timeout_s: float = 15) -> bool:
    """Send `data` on a fresh connection; True if the peer then closed it (it was dropped)."""
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.sendall(data)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if not s.recv(4096):
                    return True
            except ConnectionResetError:
                return True
            except socket.timeout:
                return False
    return False


def test_wrong_or_no_password_decodes_nothing_and_fuzz_crashes_nothing(tmp_path):
    base = free_base_port()
    q = Quorum(tmp_path, ["127.0.0.1"] * 3, [base + 1000 + i for i in range(3)],
               [base + 1100 + i for i in range(3)])
    marker = tmp_path / "unpickled"
    payload = zlib.compress(pickle.dumps(Marker(str(marker))))
    # the payload is real: an unpickler creates the marker (checked here, then removed)
    pickle.loads(zlib.decompress(payload))
    assert marker.exists()
    marker.unlink()
    try:
        q.start()
        trio.run(q.commit, "before")
        attacks = {"no password": frame(payload),
                   "wrong password": frame(fernet("not-" + q.password).encrypt_at_time(
                       payload, int(time.monotonic())))}
        for what, data in attacks.items():
            for i in range(3):
                assert send_and_see_closed("127.0.0.1", q.raft_ports[i], data), \
                    f"controller {IDS[i]} kept a connection with {what}"
        trio.run(q.commit, "after-attacks")
        assert not marker.exists(), "a controller unpickled a peer's message without the password"
        # the node's output reaches its log file through a pump thread: wait for the line
        deadline = time.monotonic() + 15
        while not all(q.log_lines(cid, DROP_LINE) for cid in IDS) and \
                time.monotonic() < deadline:
            time.sleep(0.1)
        for cid in IDS:
            assert q.log_lines(cid, DROP_LINE), f"controller {cid} did not log the drop"

        rng = random.Random(20_6)
        for n in range(FUZZ_CASES):
            i = rng.randrange(3)
            with socket.create_connection(("127.0.0.1", q.raft_ports[i]), timeout=10) as s:
                s.sendall(fuzz_case(rng, q.password if n % 50 == 0 else None))
        assert q.alive() == [True, True, True]
        trio.run(q.commit, "after-fuzz")
        trio.run(q.same_end)
        assert q.alive() == [True, True, True]
        for cid in IDS:
            text = q.log_path(cid).read_text()
            assert "failed _onTick" not in text and "Traceback" not in text, \
                f"controller {cid} logged a failure:\n{text[-3000:]}"
        assert not marker.exists()

        # control: with the right password the very same bytes are decoded, so the refusals
        # above were the password's doing
        right = frame(fernet(q.password).encrypt_at_time(payload, int(time.monotonic())))
        with socket.create_connection(("127.0.0.1", q.raft_ports[0]), timeout=10) as s:
            s.sendall(right)
            deadline = time.monotonic() + 15
            while not marker.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        assert marker.exists(), "the right password did not get the pickle decoded"
        trio.run(q.commit, "after-control")
        assert q.alive() == [True, True, True]
    finally:
        q.stop()


def test_a_controller_with_another_password_is_kept_out_and_logged(tmp_path):
    """The misconfiguration an operator meets: 3002 was given another password. 3000 and 3001
    form the quorum and commit; 3002 gets nothing (no leader, no metadata); both sides log."""
    base = free_base_port()
    right = dev_raft_password(tmp_path)
    q = Quorum(tmp_path, ["127.0.0.1"] * 3, [base + 1000 + i for i in range(3)],
               [base + 1100 + i for i in range(3)], passwords=[right, right, "another-" + right])
    try:
        q.start()
        trio.run(lambda: q.commit("two-of-three", among=(0, 1)))
        # committed means on a majority's logs; the follower learns the commit index (its
        # stream's end) with the leader's next message, a Raft heartbeat later at most
        deadline = time.monotonic() + 10
        while True:
            ends = [trio.run(q.end, i) for i in range(3)]
            assert ends[2] == 0, ends              # 3002 gets nothing, ever
            if ends[0] == ends[1] > 0:
                break
            assert time.monotonic() < deadline, ends
            time.sleep(0.05)
        deadline = time.monotonic() + 20
        while not (q.log_lines(3000, "Raft port: dropped the connection from") and
                   q.log_lines(3001, "Raft port: dropped the connection from") and
                   q.log_lines(3002, "closed by the peer during the key exchange")):
            assert time.monotonic() < deadline, "a controller did not log the password mismatch"
            time.sleep(0.2)
        assert q.alive() == [True, True, True]
    finally:
        q.stop()


def fuzz_case(rng: random.Random, password: str | None) -> bytes:
    """Bytes a Raft port might see from a stranger. With `password` (a few cases): a genuine
    token of random bytes (decrypts, then zlib/pickle fail on it)."""
    kind = rng.randrange(7)
    body = rng.randbytes(rng.randrange(0, 2048))
    if password is not None:
        return frame(fernet(password).encrypt_at_time(body, int(time.monotonic())))
    if kind == 0:
        return body                                              # raw noise
    if kind == 1:
        return frame(body)                                       # well framed noise
    if kind == 2:
        return struct.pack("i", rng.choice([-1, -4, -(2 ** 31), 0])) + body   # absurd lengths
    if kind == 3:
        return struct.pack("i", rng.randrange(len(body) + 1, 2 ** 31)) + body  # truncated
    if kind == 4:                                                # base64 token, bad HMAC
        return frame(base64.urlsafe_b64encode(b"\x80" + body))
    if kind == 5:                                                # many frames back to back
        return b"".join(frame(rng.randbytes(rng.randrange(64))) for _ in range(rng.randrange(20)))
    return frame(zlib.compress(body))                            # unencrypted compressed noise


def test_idle_and_oversized_strangers_are_cut_off(tmp_path):
    from metadata_quorum.quorum.raft_port import MAX_PRE_AUTH_PER_HOST, PRE_AUTH_TIMEOUT_S
    base = free_base_port()
    q = Quorum(tmp_path, ["127.0.0.1"] * 3, [base + 1000 + i for i in range(3)],
               [base + 1100 + i for i in range(3)])
    idle: list[socket.socket] = []
    try:
        q.start()
        trio.run(q.commit, "before")
        idle = [socket.create_connection(("127.0.0.1", q.raft_ports[0]), timeout=10)
                for _ in range(100)]
        t0 = time.monotonic()
        closed_at = wait_closed(idle, PRE_AUTH_TIMEOUT_S + 30)
        assert len(closed_at) == len(idle), f"{len(idle) - len(closed_at)} idle ones still open"
        prompt = sum(1 for t in closed_at.values() if t - t0 < PRE_AUTH_TIMEOUT_S / 2)
        assert prompt >= len(idle) - MAX_PRE_AUTH_PER_HOST, prompt
        trio.run(q.commit, "after-idle")

        # a frame claiming 2 GiB, then megabytes of it: cut off long before the end
        sent = 0
        with socket.create_connection(("127.0.0.1", q.raft_ports[1]), timeout=10) as s:
            chunk = rng_bytes(64 * 1024)
            try:
                s.sendall(struct.pack("i", 2 ** 31 - 1))
                while sent < 64 * 1024 * 1024:
                    s.sendall(chunk)
                    sent += len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass
        assert sent < 64 * 1024 * 1024, "the Raft port buffered 64 MiB from a stranger"
        trio.run(q.commit, "after-oversized")
        trio.run(q.same_end)
        assert q.alive() == [True, True, True]
        assert q.log_lines(3000, "too many connections have not authenticated yet")
        assert wait_log(q, 3000, "not authenticated within")
        assert q.log_lines(3001, "bytes before authenticating")
    finally:
        for s in idle:
            s.close()
        q.stop()


def wait_log(q: Quorum, cid: int, text: str, timeout_s: float = 20) -> list[str]:
    """The log lines with `text`, once there (the drop log is rate-limited per host)."""
    deadline = time.monotonic() + timeout_s
    while not (lines := q.log_lines(cid, text)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return lines


def rng_bytes(n: int) -> bytes:
    return random.Random(n).randbytes(n)


def wait_closed(socks, timeout_s: float) -> dict:
    """{socket: when the peer closed it} for those closed within `timeout_s`."""
    closed: dict = {}
    deadline = time.monotonic() + timeout_s
    while len(closed) < len(socks) and time.monotonic() < deadline:
        open_ = [s for s in socks if s not in closed]
        readable, _, _ = select.select(open_, [], [], 0.5)
        for s in readable:
            try:
                data = s.recv(4096)
            except ConnectionResetError:
                data = b""
            if not data:
                closed[s] = time.monotonic()
    return closed


def _free_on_all(hosts, rng: random.Random, span: int) -> int:
    for _ in range(200):
        low, high = port_range()
        port = rng.randrange(low, high - span)
        try:
            for host in hosts:
                for p in (port, port + span):
                    with socket.socket() as s:
                        s.bind((host, p))
        except OSError:
            continue
        return port
    raise RuntimeError("no port free on every address")


def test_controllers_bind_exactly_their_own_address(tmp_path):
    hosts = ["127.0.0.11", "127.0.0.12", "127.0.0.13"]
    listener = _free_on_all(hosts + ["127.0.0.1"], random.Random(os.getpid() ^ time.time_ns()),
                            100)
    raft = listener + 100
    q = Quorum(tmp_path, hosts, [listener] * 3, [raft] * 3)
    try:
        q.start()
        trio.run(q.commit, "exact")
        end = trio.run(q.same_end)
        assert end > 0
        # nothing on the wildcard: the port is not open on 127.0.0.1
        for port in (raft, listener):
            with socket.socket() as s:
                assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} open on 127.0.0.1"
        assert q.alive() == [True, True, True]
    finally:
        q.stop()
