"""`raftka console` against a live cluster: the console runs as its own process (as users run
it); every page and JSON API is fetched over HTTP and checked against what was produced and
committed; hostile bytes (record keys, values, headers, group and client ids) come back
escaped; anything but GET/HEAD is refused. Then a real headless Chromium (Debian package
`chromium`) loads every page: no script errors (errors.js records them on <html
data-js-errors>, read back with --dump-dom), the charts draw samples, and no injected element
exists in the DOM."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from partition_server.testing import LiveCluster

pytestmark = pytest.mark.live
TOPIC = "console-orders"
EVIL = '<img src=x id=pwned onerror="document.title=1">'
GROUP = "billing" + EVIL
BASE_MS = int(time.time() * 1000) - 3_600_000
STATIC = Path(__file__).resolve().parents[1] / "console" / "static"


def _produce_and_commit(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, 2, 3)]).values():
        f.result(30)
    p = CKProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(30):        # partition 0's record at offset k has timestamp BASE + k minutes
        p.produce(TOPIC, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2,
                  headers=[("h", b"\x00\xff")], timestamp=BASE_MS + (i // 2) * 60_000)
    p.produce(TOPIC, key=EVIL.encode(), value=EVIL.encode(), partition=0, headers=[(EVIL, b"1")])
    assert p.flush(30) == 0
    # a group (hostile name and client id) that consumed 10 of partition 0 and all of 1
    c = CKConsumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "client.id": EVIL,
                    "enable.auto.commit": False})
    c.commit(offsets=[CKTopicPartition(TOPIC, 0, 10), CKTopicPartition(TOPIC, 1, 15)],
             asynchronous=False)
    c.close()
    c = CKConsumer({"bootstrap.servers": bootstrap, "group.id": "audit",
                    "enable.auto.commit": False})          # same partition, another offset
    c.commit(offsets=[CKTopicPartition(TOPIC, 0, 12)], asynchronous=False)
    c.close()


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    cluster = LiveCluster(tmp_path_factory.mktemp("console")).start()
    proc = None
    try:
        _produce_and_commit(cluster.bootstrap)
        proc = subprocess.Popen([sys.executable, "-m", "clients.cli.main", "console",
                                 "--bootstrap-server", cluster.bootstrap, "--port", "0",
                                 "--interval", "0.5"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        line = proc.stdout.readline()            # the URL, once it serves
        match = re.search(r"http://[\d.]+:\d+/", line)
        assert match, (line, proc.stderr.read() if proc.poll() is not None else "")
        yield match.group(0)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
        cluster.stop()


def get(url: str, method: str = "GET") -> tuple[int, dict, str]:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def api(base: str, path: str) -> dict:
    status, headers, body = get(base + "api/" + path)
    assert status == 200, body
    assert headers["Content-Type"].startswith("application/json")
    return json.loads(body)


def test_every_api_over_http(console):
    o = api(console, "overview")
    assert o["quorum"]["leader_id"] in [v["id"] for v in o["quorum"]["voters"]]
    assert len(o["quorum"]["voters"]) == 3
    assert [(b["id"], b["state"]) for b in o["cluster"]["brokers"]] == \
        [(0, "unfenced"), (1, "unfenced"), (2, "unfenced")]
    assert o["partitions"]["offline"] == 0
    t = {x["name"]: x for x in api(console, "topics")["topics"]}
    parts = t[TOPIC]["partitions"]
    assert [(p["log_end_offset"], p["messages"]) for p in parts] == [(16, 16), (15, 15)]
    assert all(sorted(p["isr"]) == [0, 1, 2] and p["size"] > 0 for p in parts)
    assert all(s > 0 for p in parts for s in p["replica_sizes"].values())
    before = time.time()
    groups = {x["group"]: x for x in api(console, "groups")["groups"]}
    after = time.time()
    lag = {p["partition"]: (p["lag"], p["lag_seconds"]) for p in groups[GROUP]["partitions"]}
    assert lag[1] == (0, 0.0)
    # lag in seconds: the age of the record at the committed offset (10 and 12 on partition 0)
    assert lag[0][0] == 6
    assert before - BASE_MS / 1000 - 600 - 1 <= lag[0][1] <= after - BASE_MS / 1000 - 600 + 1
    (audit,) = groups["audit"]["partitions"]
    assert audit["lag"] == 4
    assert before - BASE_MS / 1000 - 720 - 1 <= audit["lag_seconds"] <= \
        after - BASE_MS / 1000 - 720 + 1
    m = api(console, f"messages?topic={TOPIC}&partition=1&offset=5&count=3&format=hex")
    assert [(r["offset"], r["key"], r["headers"]) for r in m["records"]] == \
        [(5, "6b 31 31", [["h", "00 ff"]]), (6, "6b 31 33", [["h", "00 ff"]]),
         (7, "6b 31 35", [["h", "00 ff"]])]
    m = api(console, f"messages?topic={TOPIC}&partition=0&timestamp=0&count=200")
    assert len(m["records"]) == 16 and m["records"][-1]["value"] == EVIL
    r = api(console, "reassignments")
    assert r["moves"] == {"reassignments": []}
    assert r["balancer"]["state"] and len(r["balancer"]["brokers"]) == 3
    deadline = time.monotonic() + 30
    while len(api(console, "traffic")["latency_ms"]) < 3:
        assert time.monotonic() < deadline, "the sampler took no samples"
        time.sleep(0.2)
    assert TOPIC in api(console, "traffic")["topics"]


def test_pages_escape_user_data_and_refuse_writes(console):
    for path, expect in [("", "Metadata quorum"), ("topics", TOPIC), ("groups", "LAG (SECONDS)"),
                         ("charts", "charts.js"), ("reassignments", "Balancer"),
                         (f"messages?topic={TOPIC}&partition=0&offset=30", "high watermark 16")]:
        status, headers, body = get(console + path)
        assert status == 200 and body.startswith("<!DOCTYPE html>"), (path, body[:300])
        assert "script-src 'self'" in headers["Content-Security-Policy"]
        assert expect in body, (path, body[:2000])
        assert EVIL not in body and "<img" not in body, path
    _, _, groups = get(console + "groups")
    assert "billing&lt;img src=x id=pwned onerror=&quot;document.title=1&quot;&gt;" in groups
    _, _, msgs = get(console + f"messages?topic={TOPIC}&partition=0&offset=15")
    assert msgs.count("&lt;img src=x id=pwned") == 3                 # key, value, header key
    status, _, body = get(console + f"messages?topic={TOPIC}&count=0")
    assert status == 200 and "count must be between 1 and 200" in body
    assert get(console + "api/messages?topic=x&count=abc")[0] == 400
    status, _, body = get(console + "messages?topic=no-such-topic")
    assert status == 200 and 'class="error"' in body
    status, _, body = get(console + f"messages?topic={TOPIC}&partition=99")
    assert status == 200 and 'class="error"' in body
    status, body = get(console + f"api/messages?topic={TOPIC}&partition=99")[::2]
    assert status == 502 and "has no partition 99 (it has 2)" in body, body
    assert get(console + "nope")[0] == 404 and get(console + "api/nope")[0] == 404
    assert get(console + "static/../data.py")[0] == 404
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, headers, _ = get(console + "api/topics", method)
        assert status == 405 and headers["Allow"] == "GET, HEAD"
    assert get(console, "HEAD")[0] == 200


def test_a_port_in_use_is_a_clear_error(console):
    port = console.rstrip("/").rsplit(":", 1)[1]
    bootstrap = api(console, "overview")["cluster"]["brokers"][0]
    r = subprocess.run([sys.executable, "-m", "clients.cli.main", "console", "--bootstrap-server",
                        f"{bootstrap['host']}:{bootstrap['port']}", "--port", port],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.startswith(f"raftka console: cannot listen on "
                                                     f"127.0.0.1:{port}"), r.stderr


def chromium(*args: str, timeout: float = 90) -> str:
    exe = shutil.which("chromium")
    assert exe, "Debian package chromium is not installed (.ci/run installs it)"
    out = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu",
                          "--disable-dev-shm-usage", "--virtual-time-budget=4000", *args],
                         capture_output=True, text=True, timeout=timeout)
    return out.stdout


def test_the_error_collector_catches_a_script_error(tmp_path):
    """So that the check below can fail: a page with a throwing script reports it."""
    (tmp_path / "errors.js").write_bytes((STATIC / "errors.js").read_bytes())
    (tmp_path / "bad.html").write_text('<html><head><script src="errors.js"></script>'
                                       "<script>undefinedFunction()</script></head></html>")
    dom = chromium("--dump-dom", (tmp_path / "bad.html").as_uri())
    assert re.search(r'data-js-errors="[^"]*undefinedFunction is not defined', dom), dom[:500]


def test_pages_render_in_headless_chromium_without_script_errors(console):
    for path, expect in [("", "observer (broker)"), ("topics", "SIZE PER REPLICA"),
                         ("groups", "billing&lt;img"), ("charts", 'data-samples="'),
                         (f"messages?topic={TOPIC}&partition=0&offset=15&format=text", "v"),
                         ("reassignments", "balancer-state")]:
        dom = chromium("--dump-dom", console + path)
        assert '<html lang="en" data-js-errors="">' in dom, (path, dom[:400])
        assert expect in dom, (path, dom[:2000])
        assert 'id="pwned"' not in dom and "<img" not in dom, path
    dom = chromium("--dump-dom", console + "charts")
    assert int(re.search(r'data-samples="(\d+)"', dom).group(1)) >= 1


def test_a_reassignment_in_progress_shows_with_its_copy(console):
    """Last in this module: it leaves a move held by a 1 byte/s throttle on the cluster."""
    from clients.admin import (AlterConfigOp, ConfigResource, ConfigResourceType, NewTopic,
                               SyncAdmin)
    from clients.cluster import TopicPartition
    b = api(console, "overview")["cluster"]["brokers"][0]
    bootstrap = f"{b['host']}:{b['port']}"
    with SyncAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic("moving", replica_assignment={0: [0, 1]})])
        p = CKProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        # More than one follower fetch holds (replica.fetch.max.bytes, 1 MiB): a throttle not yet
        # exceeded lets a whole fetch through (as Kafka's does), so 200 KB was copied at once
        # and the move could finish before the page was read.
        for i in range(1500):
            p.produce("moving", value=b"x" * 1000, partition=0)
        assert p.flush(30) == 0
        T, B = ConfigResourceType.TOPIC, ConfigResourceType.BROKER
        assert admin.incremental_alter_configs({
            ConfigResource(T, "moving"): [
                AlterConfigOp("follower.replication.throttled.replicas", "0:2")],
            ConfigResource(B, "2"): [AlterConfigOp("follower.replication.throttled.rate", "1")]}
        ) == {ConfigResource(T, "moving"): None, ConfigResource(B, "2"): None}
        tp = TopicPartition("moving", 0)
        assert admin.alter_partition_reassignments({tp: [0, 1, 2]}) == {tp: None}
    moves = api(console, "reassignments")["moves"]["reassignments"]
    (row,) = [m for m in moves if m["topic"] == "moving"]
    assert row["adding"] == [2] and row["removing"] == [] and row["replicas"] == [0, 1, 2]
    assert row["leader_size"] >= 1_500_000
    assert row["adding_sizes"]["2"] is None or row["adding_sizes"]["2"] < row["leader_size"]
    _, _, page = get(console + "reassignments")
    assert "<td>moving</td><td>0</td><td>0, 1, 2</td><td>2</td>" in page
