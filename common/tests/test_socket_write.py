"""common/socket_write.py: a frame the socket takes at once is written without a checkpoint;
a full send buffer falls back to trio (everything arrives, in order); a closed or broken stream
raises trio's own errors."""

import socket

import pytest
import trio
import trio.testing

from common import socket_write


def _pair():
    a, b = socket.socketpair()
    return trio.SocketStream(trio.socket.from_stdlib_socket(a)), b


async def test_a_frame_the_socket_takes_is_written_without_a_checkpoint():
    stream, peer = _pair()
    with trio.testing.assert_no_checkpoints():
        await socket_write.send_all(stream, b"hello")
    assert peer.recv(100) == b"hello"
    await stream.aclose()
    peer.close()


async def test_a_full_buffer_falls_back_and_everything_arrives_in_order():
    stream, peer = _pair()
    stream.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    data = bytes(range(256)) * 8192            # 2 MiB: far more than the buffers hold
    got = bytearray()

    def drain():
        while len(got) < len(data):
            chunk = peer.recv(65536)
            if not chunk:
                break
            got.extend(chunk)

    async with trio.open_nursery() as n:
        n.start_soon(trio.to_thread.run_sync, drain)
        await socket_write.send_all(stream, data)
    assert bytes(got) == data
    await stream.aclose()
    peer.close()


async def test_closed_and_broken_streams_raise_trios_errors():
    stream, peer = _pair()
    await stream.aclose()
    with pytest.raises(trio.ClosedResourceError):
        await socket_write.send_all(stream, b"x")
    peer.close()
    stream, peer = _pair()
    peer.close()
    with pytest.raises(trio.BrokenResourceError):
        for _ in range(100):                   # the first write may still be accepted
            await socket_write.send_all(stream, b"x" * 65536)
    await stream.aclose()


async def test_tls_and_other_streams_take_trios_path():
    sent = []

    class Recorder(trio.abc.SendStream):
        async def send_all(self, data):
            sent.append(bytes(data))

        async def wait_send_all_might_not_block(self):
            pass

        async def aclose(self):
            pass

    await socket_write.send_all(Recorder(), b"abc")
    assert sent == [b"abc"]
