"""The fault proxy on loopback: forward, delay, blackhole (one way or both), cut, heal."""

import socket
import threading
import time

import pytest

from chaos_tests.live.proxy import FROM_TARGET, TO_TARGET, ProxyThread


@pytest.fixture
def echo():
    """A tiny echo server (the proxy's target)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    stop = False

    def serve(conn):
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                conn.sendall(data)

    def accept():
        while not stop:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()
    threading.Thread(target=accept, daemon=True).start()
    yield srv.getsockname()[1]
    stop = True
    srv.close()


@pytest.fixture
def proxy(echo):
    p = ProxyThread()
    p.add("link", "127.0.0.1", echo)
    with p:
        yield p


def roundtrip(port, payload=b"ping", timeout=2.0):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(payload)
        return s.recv(65536)


def closed(s) -> bool:
    """The peer closed (FIN or RST), as opposed to a silent connection."""
    try:
        return s.recv(10) == b""
    except ConnectionResetError:
        return True


def test_forward_and_delay(proxy):
    port = proxy.port("link")
    assert roundtrip(port) == b"ping"
    proxy.delay("link", 300)
    t0 = time.monotonic()
    assert roundtrip(port) == b"ping"
    assert time.monotonic() - t0 >= 0.5          # delayed each way
    proxy.heal()
    t0 = time.monotonic()
    assert roundtrip(port) == b"ping"
    assert time.monotonic() - t0 < 0.3


def test_blackhole_is_silent_then_heals(proxy):
    port = proxy.port("link")
    proxy.blackhole("link")
    with pytest.raises(socket.timeout):
        roundtrip(port, timeout=0.5)
    proxy.heal("link")
    assert roundtrip(port) == b"ping"


@pytest.mark.parametrize("direction", [TO_TARGET, FROM_TARGET])
def test_one_way_blackhole(proxy, direction):
    port = proxy.port("link")
    proxy.blackhole("link", direction=direction)
    with pytest.raises(socket.timeout):
        roundtrip(port, timeout=0.5)
    assert proxy.group.links["link"].dropped_bytes > 0
    proxy.heal()
    assert roundtrip(port) == b"ping"


def test_cut_closes_open_connections_and_refuses_new_ones(proxy):
    port = proxy.port("link")
    s = socket.create_connection(("127.0.0.1", port), timeout=2)
    s.sendall(b"a")
    assert s.recv(10) == b"a"
    proxy.cut("link")
    assert closed(s)                              # closed by the proxy
    s.close()
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s2:
        try:
            s2.sendall(b"b")
        except OSError:
            pass
        assert closed(s2)
    proxy.heal()
    assert roundtrip(port) == b"ping"
