"""Where one transaction's time goes, hop by hop, from the wire (issue #23 item 2).

A cluster (3 controllers + 3 brokers, RF 3) runs bench/transactions.py's loop (confluent-kafka,
one producer, 10 records over 3 partitions, commit) while `tcpdump` records the loopback traffic
of the brokers' ports. Every Kafka frame of the capture is then placed in time: requests by
their header (API, correlation id, client id: `rdkafka` is the client, `replica-N` broker N's
follower fetcher, `raftka-txn-N` broker N's marker sender, `…-verify` its KIP-890
verifications), answers by the correlation id of their connection. No process is instrumented,
so every broker runs as it does in `transactions.py`.

It prints, per transaction cycle (one EndTxn answer to the next; medians and quartiles, ms):
- the phases in order: the markers (EndTxn answer → WriteTxnMarkers out → their answers), the
  client's own gap until its next AddPartitionsToTxn, how long that request waits for the
  markers, its Ongoing round, the Produce requests (verification + replication), EndTxn;
- per leader: a request that appends (Produce, WriteTxnMarkers, EndTxn, AddPartitionsToTxn) →
  its first follower answer → its second → the followers' next fetches → its answer;
- per follower: an answer with records → its next fetch (the follower's turnaround).

    apt-get install -y tcpdump       # run as root (capturing on lo)
    python3 bench/txn_timeline.py [--txns 300] [--tree /tmp/old --tree . --rounds 2]

With several trees the rounds alternate between them, one cluster per tree.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench import transactions  # noqa: E402

PRODUCE, FETCH, ADD_PARTITIONS, END_TXN, WRITE_MARKERS = 0, 1, 24, 26, 27
NAMES = {PRODUCE: "Produce", FETCH: "Fetch", ADD_PARTITIONS: "AddPartitionsToTxn",
         END_TXN: "EndTxn", WRITE_MARKERS: "WriteTxnMarkers"}
Frame = collections.namedtuple("Frame", "t kind conn api corr client size broker")


# -- capture --------------------------------------------------------------------------------------

def capture(ports: list[int], path: str) -> subprocess.Popen:
    """tcpdump on lo for `ports`, once it listens (its stderr says so; 30 s at most)."""
    filt = " or ".join(f"tcp port {p}" for p in ports)
    proc = subprocess.Popen(["tcpdump", "-i", "lo", "-n", "-s", "0", "-B", "65536", "-U",
                             "-Z", "root", "-w", path, filt],
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    line = ""
    while "listening on" not in line:
        ready, _, _ = select.select([proc.stderr], [], [], max(0.0, deadline - time.monotonic()))
        line = proc.stderr.readline() if ready else ""
        if not line:
            proc.kill()
            raise SystemExit("tcpdump did not start within 30 s (root? tcpdump installed?)")
    return proc


def stop_capture(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return " ".join(ln for ln in err.splitlines() if "dropped" in ln or "captured" in ln)


# -- pcap → Kafka frames ---------------------------------------------------------------------

def tcp_segments(path: str):
    """(time, src port, dst port, seq, payload) of every IPv4 TCP segment with a payload, from
    a pcap file of Ethernet frames (Linux loopback)."""
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack_from("<I", data, 0)[0]
    scale = {0xA1B2C3D4: 1e-6, 0xA1B23C4D: 1e-9}.get(magic)
    if scale is None:
        raise SystemExit(f"{path}: not a little-endian pcap file")
    pos = 24
    while pos + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack_from("<IIII", data, pos)
        pkt = data[pos + 16:pos + 16 + incl]
        pos += 16 + incl
        if len(pkt) < 34 or pkt[12:14] != b"\x08\x00" or pkt[23] != 6:
            continue                                    # not IPv4 over Ethernet, or not TCP
        ihl = (pkt[14] & 0x0F) * 4
        total = struct.unpack_from(">H", pkt, 16)[0]
        tcp = 14 + ihl
        sport, dport, seq = struct.unpack_from(">HHI", pkt, tcp)
        off = (pkt[tcp + 12] >> 4) * 4
        payload = pkt[tcp + off:14 + total]
        if payload:
            yield sec + frac * scale, sport, dport, seq, payload


def kafka_frames(path: str, brokers: dict[int, int]) -> list[Frame]:
    """Every request and answer to or from a broker port (`brokers`: port → broker id), at the
    time of the segment that completed it."""
    streams: dict = {}
    pending: dict = {}
    clients: dict = {}
    broken: set = set()
    out: list[Frame] = []
    for t, sport, dport, seq, payload in tcp_segments(path):
        key = (sport, dport)
        if key in broken:
            continue
        buf, next_seq = streams.get(key, (b"", None))
        if next_seq is not None and seq != next_seq:
            if 0 < (seq - next_seq) & 0xFFFFFFFF < 1 << 31:
                broken.add(key)                         # bytes missing from the capture:
                print(f"capture gap on {key}: its later frames are left out", file=sys.stderr)
                continue                                # frame boundaries are lost
            skip = (next_seq - seq) & 0xFFFFFFFF
            if skip >= len(payload):
                continue                                # a retransmission of what we have
            payload = payload[skip:]
        buf += payload
        next_seq = (seq + len(payload)) & 0xFFFFFFFF if next_seq is None \
            else (next_seq + len(payload)) & 0xFFFFFFFF
        while len(buf) >= 4:
            n = struct.unpack_from(">i", buf)[0]
            if len(buf) < 4 + n:
                break
            frame, buf = buf[4:4 + n], buf[4 + n:]
            if dport in brokers:                        # a request
                api, _, corr, clen = struct.unpack_from(">hhih", frame)
                client = frame[10:10 + clen].decode() if clen > 0 else ""
                clients[key] = client
                pending[(key, corr)] = api
                out.append(Frame(t, "req", key, api, corr, client, n, brokers[dport]))
            elif sport in brokers:                      # an answer
                conn = (dport, sport)
                corr = struct.unpack_from(">i", frame)[0]
                api = pending.pop((conn, corr), -1)
                out.append(Frame(t, "resp", conn, api, corr, clients.get(conn, "?"), n,
                                 brokers[sport]))
        streams[key] = (buf, next_seq)
    return out


# -- analysis -------------------------------------------------------------------------------------

def _first(frames, pred):
    return next((f.t for f in frames if pred(f)), None)


def _last(frames, pred):
    return next((f.t for f in reversed(frames) if pred(f)), None)


def cycle_phases(frames: list[Frame]) -> dict[str, list[float]]:
    """Per transaction cycle (one EndTxn answer to the next), the phases' lengths in ms."""
    ends = [i for i, f in enumerate(frames) if f.kind == "resp" and f.api == END_TXN]
    out: dict[str, list[float]] = collections.defaultdict(list)
    for a, b in zip(ends, ends[1:]):
        cyc, t0 = frames[a:b + 1], frames[a].t
        client = [f for f in cyc if f.client == "rdkafka"]
        wm_out = _first(cyc, lambda f: f.api == WRITE_MARKERS and f.kind == "req")
        wm_in = _last(cyc, lambda f: f.api == WRITE_MARKERS and f.kind == "resp")
        ap_out = _first(client, lambda f: f.api == ADD_PARTITIONS and f.kind == "req")
        ap_in = _first(client, lambda f: f.api == ADD_PARTITIONS and f.kind == "resp")
        pr_out = _first(client, lambda f: f.api == PRODUCE and f.kind == "req")
        pr_in = _last(client, lambda f: f.api == PRODUCE and f.kind == "resp")
        et_out = _first(client, lambda f: f.api == END_TXN and f.kind == "req")
        if None in (wm_out, wm_in, ap_out, ap_in, pr_out, pr_in, et_out):
            continue                                    # not a plain cycle (a retry, say)
        for name, start, end in (
                ("1 EndTxn answer -> first WriteTxnMarkers out", t0, wm_out),
                ("2 -> last WriteTxnMarkers answer", wm_out, wm_in),
                ("  (client) EndTxn answer -> AddPartitionsToTxn", t0, ap_out),
                ("  (coordinator) AddPartitionsToTxn waits for markers", ap_out,
                 max(ap_out, wm_in)),
                ("3 last marker answer -> AddPartitionsToTxn answer", max(ap_out, wm_in), ap_in),
                ("4 (client) -> first Produce", ap_in, pr_out),
                ("5 first Produce -> last Produce answer", pr_out, pr_in),
                ("6 (client) -> EndTxn", pr_in, et_out),
                ("7 EndTxn -> its answer (PrepareCommit round)", et_out, frames[b].t),
                ("= cycle", t0, frames[b].t)):
            out[name].append((end - start) * 1000)
    return out


def leader_phases(frames: list[Frame]) -> dict[str, list[float]]:
    """For each request that appends on a leader: → first follower answer with records → the
    second → the last of the followers' next fetches → its own answer (ms)."""
    out: dict[str, list[float]] = collections.defaultdict(list)
    for i, f in enumerate(frames):
        if f.kind != "req" or f.api not in (PRODUCE, WRITE_MARKERS, END_TXN, ADD_PARTITIONS) \
                or f.client.endswith("-verify"):
            continue
        answers, fetches, done = [], [], None
        for g in frames[i + 1:i + 120]:
            if g.broker != f.broker or g.api != FETCH:
                if g.kind == "resp" and g.conn == f.conn and g.corr == f.corr:
                    done = g.t
                    break
                continue
            if g.kind == "resp" and len(answers) < 2 and g.size > 100 \
                    and g.client not in [c for _, c in answers]:
                answers.append((g.t, g.client))
            elif g.kind == "req" and len(answers) == 2 and len(fetches) < 2:
                fetches.append(g.t)
        if done is None or len(answers) < 2 or len(fetches) < 2:
            continue
        name = f"{NAMES[f.api]} on broker {f.broker}"
        for step, start, end in (("-> 1st follower answer", f.t, answers[0][0]),
                                 ("-> 2nd", answers[0][0], answers[1][0]),
                                 ("-> followers' next fetches", answers[1][0], max(fetches)),
                                 ("-> answer", max(fetches), done),
                                 ("total", f.t, done)):
            out[f"{name}: {step}"].append((end - start) * 1000)
    return out


def follower_turnarounds(frames: list[Frame]) -> dict[str, list[float]]:
    """A follower's answer with records → that follower's next fetch on the link (ms)."""
    last: dict = {}
    out: dict[str, list[float]] = collections.defaultdict(list)
    for f in frames:
        if f.api != FETCH:
            continue
        if f.kind == "resp":
            last[f.conn] = f
        elif f.conn in last:
            r = last.pop(f.conn)
            if r.size > 100:
                out[f"{f.client} from broker {r.broker}"].append((f.t - r.t) * 1000)
    return out


def quartiles(values: list[float]) -> str:
    v = sorted(values)
    n = len(v)
    return f"{v[n // 2]:6.2f} {v[n // 4]:6.2f} {v[3 * n // 4]:6.2f} {n:5d}"


def report(title: str, table: dict[str, list[float]]) -> None:
    print(f"\n{title:60s}    p50    p25    p75     n")
    for name in sorted(table):
        print(f"{name:60s} {quartiles(table[name])}")


# -- runs -----------------------------------------------------------------------------------------

def run_round(cluster, txns: int, workdir: str, tag: str) -> list[Frame]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    brokers = {b.port: b.id for b in admin.list_topics(timeout=10).brokers.values()}
    path = os.path.join(workdir, f"{tag}.pcap")
    proc = capture(sorted(brokers), path)
    try:
        rate, lat = transactions.txn_rate(cluster.bootstrap, "bench-txn", txns, f"tl-{tag}")
    finally:
        counts = stop_capture(proc)
    print(f"{tag}: {rate:.1f} txn/s, commit p50 {transactions.pct(lat, 0.5) * 1000:.1f} ms "
          f"(load {os.getloadavg()[0]:.1f}; tcpdump: {counts})", flush=True)
    with open(path + ".json", "w") as f:
        json.dump({"brokers": brokers}, f)               # port → broker id, to read it again
    return kafka_frames(path, brokers)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--txns", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--tree", action="append", help="code tree to run the cluster from (repeat)")
    ap.add_argument("--keep", help="directory to keep the captures in")
    args = ap.parse_args()
    if shutil.which("tcpdump") is None:
        raise SystemExit("needs tcpdump (apt-get install -y tcpdump) and root")
    trees = [os.path.abspath(t) for t in args.tree] if args.tree else [None]
    workdir = args.keep or tempfile.mkdtemp(prefix="txn-timeline-")
    os.makedirs(workdir, exist_ok=True)
    clusters, frames = {}, collections.defaultdict(list)
    try:
        for tree in trees:
            clusters[tree] = c = transactions.start_cluster(tree, 3)
            admin = AdminClient({"bootstrap.servers": c.bootstrap})
            admin.create_topics([NewTopic("bench-txn", 3, 3)])["bench-txn"].result(30)
            transactions.txn_rate(c.bootstrap, "bench-txn", 50, "tl-warm-up")
        for r in range(args.rounds):
            for k, tree in enumerate(trees if r % 2 == 0 else trees[::-1]):
                tag = f"r{r}-{Path(tree).name if tree else 'here'}-{k}"
                frames[tree].append(run_round(clusters[tree], args.txns, workdir, tag))
    finally:
        for c in clusters.values():
            c.stop()
    for tree in trees:
        name = tree or "this checkout"
        tables = [collections.defaultdict(list) for _ in range(3)]
        for fr in frames[tree]:
            for table, part in zip(tables, (cycle_phases(fr), leader_phases(fr),
                                            follower_turnarounds(fr))):
                for k, v in part.items():
                    table[k] += v
        print(f"\n===== {name} (ms; captures in {workdir})")
        report("transaction cycle", tables[0])
        report("leaders: an appending request and its replication round", tables[1])
        report("followers: answer with records -> next fetch", tables[2])


if __name__ == "__main__":
    main()
