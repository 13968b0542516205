"""What this machine allows a Python broker per transaction, beside what the brokers spend
(issue #23 item 2).

A transaction at RF 3 (`transactions.py`'s loop: 10 records over 3 partitions led by 3 brokers)
is, on the wire, 20 exchanges between brokers — 16 follower fetches (two followers for each of
three markers, the Ongoing record, three data batches and PrepareCommit), 2 KIP-890
verifications and 2 WriteTxnMarkers — and 5 client requests the brokers answer
(AddPartitionsToTxn, three Produce, EndTxn). Both sides of a broker-to-broker exchange are
broker CPU; of a client request only the answering side is. So the brokers handle
`20 * 2 + 5 = 45` request-or-answer messages per transaction at the least.

The floor of one message is measured by two processes exchanging 100 B over loopback TCP with
nothing else to do, one answer at a time (CPU from getrusage in each process):
- `blocking`: plain blocking sockets: the system calls and the wake-up of the other process,
  which any broker pays, in any language;
- `trio`: the brokers' way (trio, a task per connection, `common/socket_write.send_all`'s write
  first and `common/socket_read.receive_some`'s read after a wait for readability).

Then, in the same run, `transactions.py`'s loop (confluent-kafka, RF 3) against a 3-controller +
3-broker cluster, and the brokers' CPU per transaction (the controllers' is shown apart). It
prints the floor of a transaction (45 messages at the trio floor), what the brokers spent, and
item 2's budget: 200 txn/s on this machine's cores leaves at most `cores / 200` of CPU per
transaction, and a 5 ms p50 with queueing room needs well under that (bench/README.md puts it
near 6 ms on two vCPUs).

    python3 bench/exchange_floor.py [--rounds 3] [--messages 20000] [--txns 300]
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MESSAGE = b"x" * 100
BROKER_MESSAGES_PER_TXN = 20 * 2 + 5


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _blocking_side(sock: socket.socket, n: int, first: bool) -> None:
    for _ in range(n):
        if first:
            sock.sendall(MESSAGE)
            sock.recv(4096)
        else:
            sock.sendall(sock.recv(4096))


def _trio_side(sock: socket.socket, n: int, first: bool) -> None:
    import trio

    from common import socket_read, socket_write

    async def run():
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
        for _ in range(n):
            if first:
                await socket_write.send_all(stream, MESSAGE)
                await socket_read.receive_some(stream, 4096, empty=True)
            else:
                data, _ = await socket_read.receive_some(stream, 4096, empty=True)
                await socket_write.send_all(stream, data)
    trio.run(run)


SIDES = {"blocking": _blocking_side, "trio": _trio_side}


def floor(mode: str, n: int) -> tuple[float, float, float]:
    """(round trip µs, requester CPU µs per exchange, answerer CPU µs per exchange)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:                                   # the answering process
        code = 1
        try:
            conn, _ = listener.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c0 = _cpu_s()
            SIDES[mode](conn, n, first=False)
            os.write(write_fd, f"{(_cpu_s() - c0) / n * 1e6}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    listener.close()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c0, t0 = _cpu_s(), time.perf_counter()
    SIDES[mode](sock, n, first=True)
    rtt = (time.perf_counter() - t0) / n * 1e6
    requester = (_cpu_s() - c0) / n * 1e6
    answerer = float(os.read(read_fd, 64).decode())
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise RuntimeError(f"the answering process failed ({status})")
    sock.close()
    return rtt, requester, answerer


def transactions(txns: int) -> tuple[float, float, float, float]:
    """(txn/s, commit p50 ms, brokers' CPU ms per txn, controllers' CPU ms per txn)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from bench.request_cost import cpu
    from bench.transactions import pct, start_cluster, txn_rate
    c = start_cluster(None, 3)
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})   # held: its futures need it
        admin.create_topics([NewTopic("bench-txn", 3, 3)])["bench-txn"].result(30)
        txn_rate(c.bootstrap, "bench-txn", 50, "warm")
        brokers = [p.proc.pid for p in c.procs if p.name.startswith("broker")]
        controllers = [p.proc.pid for p in c.procs if not p.name.startswith("broker")]

        def used(pids):
            return sum(sum(cpu(pid)) for pid in pids)
        b0, q0 = used(brokers), used(controllers)
        rate, latencies = txn_rate(c.bootstrap, "bench-txn", txns, "floor")
        return (rate, pct(latencies, 0.5) * 1000, (used(brokers) - b0) / txns * 1000,
                (used(controllers) - q0) / txns * 1000)
    finally:
        c.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--messages", type=int, default=20_000, help="exchanges per floor round")
    ap.add_argument("--txns", type=int, default=300, help="transactions per round")
    args = ap.parse_args()
    if min(args.rounds, args.messages, args.txns) < 1:
        ap.error("--rounds, --messages and --txns must be at least 1")
    rows: dict[str, list] = {"blocking": [], "trio": [], "txn": []}
    for r in range(args.rounds):
        for mode in ("blocking", "trio"):
            rows[mode].append(got := floor(mode, args.messages))
            print(f"round {r} {mode:8s}: round trip {got[0]:.1f} µs, CPU per exchange "
                  f"requester {got[1]:.1f} µs, answerer {got[2]:.1f} µs", flush=True)
        rows["txn"].append(got := transactions(args.txns))
        print(f"round {r} transactions: {got[0]:.1f} txn/s, commit p50 {got[1]:.1f} ms, "
              f"brokers {got[2]:.2f} ms CPU per txn, controllers {got[3]:.2f}", flush=True)

    def med(mode, i):
        return statistics.median(row[i] for row in rows[mode])
    print("\nmedians of the rounds")
    for mode in ("blocking", "trio"):
        per_message = (med(mode, 1) + med(mode, 2)) / 2
        per_txn_ms = per_message * BROKER_MESSAGES_PER_TXN / 1000
        print(f"  {mode:8s} floor: {per_message:.1f} µs of CPU per message, x "
              f"{BROKER_MESSAGES_PER_TXN} messages = {per_txn_ms:.2f} ms per transaction")
    trio_txn = (med("trio", 1) + med("trio", 2)) / 2 * BROKER_MESSAGES_PER_TXN / 1000
    brokers = med("txn", 2)
    print(f"  the brokers spent {brokers:.2f} ms per transaction ({med('txn', 0):.1f} txn/s, "
          f"commit p50 {med('txn', 1):.1f} ms; the controllers {med('txn', 3):.2f} ms): "
          f"x{brokers / trio_txn:.1f} the trio floor, {brokers - trio_txn:.2f} ms above it")
    cores = os.cpu_count() or 1
    print(f"  item 2's ceiling on {cores} cores: {cores / 200 * 1000:.1f} ms of CPU per "
          f"transaction at 100 % busy (200 txn/s), of which the trio floor is "
          f"{trio_txn / (cores / 200 * 1000) * 100:.0f} %")


if __name__ == "__main__":
    main()
