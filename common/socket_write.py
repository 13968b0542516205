"""Writing a frame to a socket without a trip through trio's scheduler when the kernel takes it.

`trio.SocketStream.send_all` ends every send with a checkpoint: the task yields, trio runs one
more pass of its loop (an `epoll_wait` and the bookkeeping of every task run) before the task
goes on — and on top of that a conflict detector, an error-translating context manager and the
non-blocking helper, per send. A socket whose send buffer has room takes the whole frame at once,
which on every replication link and client connection is the usual case, so `send_all` here tries
the socket first and only hands what is left (the buffer was full, or the write failed: trio then
raises its own error for it) to trio. One fetch exchange between two brokers is two sends; a
transaction at RF 3 forty-six (bench/README.md, "Transactions").

Not a checkpoint when the write completes at once: every caller goes on to wait for the answer or
the next request, which yields. Callers must not send on one stream from two tasks at once (trio
would detect that, this fast path does not): the broker's connection writes from one task at a
time (the answer pipeline drains before a request is answered alone) and the client connection
holds its lock. TLS streams take trio's path.
"""

from __future__ import annotations

import os

import trio


async def send_all(stream, data) -> None:
    if type(stream) is trio.SocketStream:
        try:
            sent = os.write(stream.socket.fileno(), data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            sent = 0                    # closed or broken: trio's send raises its own error
        if sent == len(data):
            return
        data = memoryview(data)[sent:]
    await stream.send_all(data)
