"""The Raft port's edge (issue 20 item 6): drop logging, the wrapped encryptor, dev passwords."""

import logging
import stat

import pytest
from cryptography.fernet import InvalidToken
from pysyncobj.encryptor import getEncryptor

from clients.cli.dev import DevLayout
from clients.cli.secure_dev import dev_raft_password
from metadata_quorum.quorum.raft import RaftQuorum
from metadata_quorum.quorum.raft_port import DropLog, _CheckedEncryptor


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_drops_are_logged_once_per_host_and_reason_per_window_with_a_count(caplog):
    clock = Clock()
    drops = DropLog(every_s=10, clock=clock)
    with caplog.at_level(logging.WARNING, "metadata_quorum.quorum.raft_port"):
        drops.dropped_from("from 10.0.0.1:5000", "bad")
        drops.dropped_from("from 10.0.0.1:5001", "bad")      # same host, same window: counted
        drops.dropped_from("from 10.0.0.2:5000", "bad")      # another host: its own line
        drops.dropped_from("from 10.0.0.1:5003", "idle")     # another reason: its own line
        drops.dropped_from("from 10.0.0.1:5004", "idle")     # counted
        clock.now += 10
        drops.dropped_from("from 10.0.0.1:5002", "bad")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4 and drops.dropped == 6
    assert "10.0.0.1:5000" in lines[0] and "10.0.0.2:5000" in lines[1]
    assert "10.0.0.1:5003: idle" in lines[2]
    assert "10.0.0.1:5002" in lines[3] and "1 more from 10.0.0.1 dropped for this" in lines[3]
    assert all("nothing it sent was decoded" in x for x in lines)


def test_checked_encryptor_passes_good_tokens_and_reports_bad_ones():
    drops = DropLog(every_s=0)
    good = getEncryptor("right")
    checked = _CheckedEncryptor(good, "from 127.0.0.1:1", drops)
    token = checked.encrypt_at_time(b"data", 7)
    assert checked.extract_timestamp(token) == 7 and checked.decrypt(token) == b"data"
    assert drops.dropped == 0
    for bad in (getEncryptor("wrong").encrypt_at_time(b"data", 7), b"", b"garbage!",
                token[:-4] + b"AAAA"):
        with pytest.raises(InvalidToken):
            checked.extract_timestamp(bad)
    assert drops.dropped == 4


def test_raft_quorum_refuses_to_run_without_a_password(tmp_path):
    for password in (None, ""):
        with pytest.raises(ValueError, match="password"):
            RaftQuorum(1, {1: "127.0.0.1:1"}, str(tmp_path), password)


def test_dev_password_is_random_per_data_dir_private_and_kept(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    first = dev_raft_password(a)
    assert len(first) >= 32 and dev_raft_password(a) == first       # a restart reads it back
    assert dev_raft_password(b) != first
    assert stat.S_IMODE((a / "raft.password").stat().st_mode) == 0o600
    layout = DevLayout(a)
    assert {layout.controller_properties(i)["raftka.controller.raft.password"]
            for i in range(3)} == {first}
    assert not list(a.glob("raft.password.*.tmp"))


def test_closed_during_key_exchange_is_logged_once_per_window(caplog):
    clock = Clock()
    drops = DropLog(every_s=10, clock=clock)
    with caplog.at_level(logging.WARNING, "metadata_quorum.quorum.raft_port"):
        for _ in range(5):                   # pysyncobj retries every 0.5 s
            drops.closed_by("to 127.0.0.1:9000")
        clock.now += 11
        drops.closed_by("to 127.0.0.1:9000")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "another raftka.controller.raft.password" in lines[0]


def test_outgoing_raft_connections_leave_from_the_raft_host():
    """pysyncobj creates its sockets itself; bind_outgoing_raft makes them bind first."""
    import socket

    from pysyncobj import tcp_connection

    from metadata_quorum.quorum.raft_port import bind_outgoing_raft
    server = socket.socket()
    server.bind(("127.77.1.13", 0))
    server.listen()
    try:
        bind_outgoing_raft("127.77.1.11")
        sock = tcp_connection.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.connect(server.getsockname())
        assert server.accept()[1][0] == "127.77.1.11"
        sock.close()
        bind_outgoing_raft("0.0.0.0")             # a wildcard Raft host: the kernel chooses
        assert tcp_connection.socket is socket
    finally:
        tcp_connection.socket = socket
        server.close()
