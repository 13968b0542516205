"""The web console's pure parts: page builders (views.py), the browser's query checks and byte
display (data.py), and throughput/latency series from samples (traffic.py)."""

from __future__ import annotations

import re

import pytest

from clients.cluster import TopicPartition
from clients.console import data, views
from clients.console.traffic import History, Sample

EVIL = '<img src=x id=pwned onerror="alert(1)">'


def _tags(page: str) -> set[str]:
    return set(re.findall(r"<([a-zA-Z][a-zA-Z0-9]*)", page))


def overview(**over) -> dict:
    d = {"quorum": {"leader_id": 3001, "leader_epoch": 4, "high_watermark": 50,
                    "voters": [{"id": 3000, "log_end_offset": 20, "lag": 2},
                               {"id": 3001, "log_end_offset": 22, "lag": 0}],
                    "observers": [{"id": 0, "log_end_offset": 50, "lag": 0}]},
         "cluster": {"cluster_id": "c1", "controller_id": 0,
                     "brokers": [{"id": 0, "host": "127.0.0.1", "port": 9092, "rack": None,
                                  "state": "unfenced"},
                                 {"id": 1, "host": "127.0.0.1", "port": 9093, "rack": "r1",
                                  "state": "fenced"}]},
         "partitions": {"topics": 2, "partitions": 7, "under_replicated": 1, "offline": 0}}
    d.update(over)
    return d


def test_overview_shows_leader_voters_observers_and_broker_states():
    page = views.overview_page(overview())
    assert '<b class="leader">3001</b>, epoch 4' in page
    assert "<td>3001</td><td>voter</td><td>leader</td><td>22</td><td>0</td>" in page
    assert "<td>3000</td><td>voter</td><td>follower</td><td>20</td><td>2</td>" in page
    assert "<td>0</td><td>observer (broker)</td>" in page
    assert '<span class="state-fenced">fenced</span>' in page
    assert '<span class="state-unfenced">unfenced</span>' in page
    assert "<td>2</td><td>7</td><td>1</td><td>0</td>" in page


def test_a_refused_section_shows_its_error_and_the_rest_still_renders():
    page = views.overview_page(overview(quorum={"error": "ClusterAuthorizationFailedError: "
                                                         "denied <b>"}))
    assert '<p class="error">ClusterAuthorizationFailedError: denied &lt;b&gt;</p>' in page
    assert "state-fenced" in page


def topics() -> dict:
    parts = [{"partition": 0, "leader": 1, "leader_epoch": 3, "replicas": [1, 2], "isr": [1],
              "offline": [], "log_start_offset": 5, "log_end_offset": 15, "messages": 10,
              "size": 2048, "replica_sizes": {1: 2048, 2: None}, "under_replicated": True},
             {"partition": 1, "leader": -1, "leader_epoch": 3, "replicas": [2], "isr": [],
              "offline": [2], "log_start_offset": None, "log_end_offset": None,
              "messages": None, "size": None, "replica_sizes": {2: None},
              "under_replicated": True}]
    return {"topics": [{"name": "orders", "internal": False, "topic_id": "x", "partitions": parts,
                        "size": 2048, "messages": 10},
                       {"name": "gone", "error": "UnknownTopicOrPartitionError", "partitions": []}],
            "log_dir_errors": {2: "broker 2: connection refused"}}


def test_topics_page_partitions_leader_isr_sizes_and_links_to_the_browser():
    page = views.topics_page(topics())
    assert '<a href="/messages?topic=orders&amp;partition=0">0</a>' in page
    assert '<span class="bad">1</span>' in page                # ISR short of the replicas
    assert '<span class="bad">none</span>' in page             # no leader
    assert "<td>2.0 KiB</td><td>1: 2.0 KiB, 2: -</td>" in page
    assert "broker 2: sizes unknown (broker 2: connection refused)" in page
    assert '<p class="error">UnknownTopicOrPartitionError</p>' in page


def group(name=EVIL, client=EVIL) -> dict:
    return {"group": name, "state": "Stable", "type": "classic", "protocol": "range",
            "coordinator": 1, "members": 1, "lag": 7,
            "member_list": [{"member_id": "m-1", "instance_id": None, "client_id": client,
                             "host": "/127.0.0.1", "assignment": ["orders-0"]}],
            "partitions": [{"topic": "orders", "partition": 0, "current_offset": 3,
                            "log_end_offset": 10, "lag": 7, "lag_seconds": 12.5,
                            "consumer_id": "m-1", "host": "/127.0.0.1", "client_id": client}]}


def test_groups_page_lag_in_messages_and_seconds_with_names_escaped():
    page = views.groups_page({"groups": [group(), {"group": "g2", "state": "Dead",
                                                    "type": "classic", "error": "boom"}]})
    assert "<td>3</td><td>10</td><td>7</td><td>12.5</td>" in page
    assert "total lag <b>7</b>" in page
    assert 'href="/messages?topic=orders&amp;partition=0&amp;offset=3"' in page
    assert "img" not in _tags(page)
    assert "&lt;img src=x id=pwned onerror=&quot;alert(1)&quot;&gt;" in page
    assert '<p class="error">boom</p>' in page
    assert "No consumer groups" in views.groups_page({"groups": []})


def test_record_bytes_headers_and_query_are_escaped_in_the_browser():
    q = {"topic": "t", "partition": 0, "count": 5, "format": "text", "offset": None,
         "timestamp": None}
    d = dict(q, log_start_offset=0, high_watermark=3, from_offset=0, records=[
        {"offset": 0, "timestamp": 1_700_000_000_123, "timestamp_type": "CreateTime",
         "key": EVIL, "value": "</code></td><script>x()</script>", "headers": [[EVIL, EVIL]]}])
    page = views.messages_page(q, d)
    assert _tags(page) - {"html", "head", "meta", "title", "link", "script", "body", "header",
                          "span", "nav", "a", "main", "h1", "pre", "form", "label", "input",
                          "select", "option", "button", "p", "table", "thead", "tr", "th",
                          "tbody", "td", "code", "br", "footer"} == set()
    assert page.count("<script") == 1 and "/static/errors.js" in page     # ours only
    assert "&lt;/code&gt;&lt;/td&gt;&lt;script&gt;x()&lt;/script&gt;" in page
    assert "2023-11-14 22:13:20.123Z (CreateTime)" in page
    assert 'href="/messages?topic=t&amp;partition=0&amp;count=5&amp;format=text&amp;offset=1"' \
        in page
    evil_q = dict(q, topic='"><script>alert(1)</script>')
    form = views.browse_form(evil_q)
    assert 'value="&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"' in form


def test_browse_query_checks_every_field():
    q = data.browse_query({"topic": "t", "partition": "2", "offset": "7", "count": "9",
                           "format": "hex"})
    assert q == {"topic": "t", "partition": 2, "offset": 7, "timestamp": None, "count": 9,
                 "format": "hex"}
    assert data.browse_query({"topic": "t", "timestamp": "1000"})["timestamp"] == 1000
    assert data.browse_query({"topic": "t"})["count"] == 20
    for bad, why in [({}, "choose a topic"), ({"topic": "t", "partition": "x"}, "whole number"),
                     ({"topic": "t", "count": "0"}, "between 1 and 200"),
                     ({"topic": "t", "count": "100000"}, "between 1 and 200"),
                     ({"topic": "t", "offset": "-1"}, "must not be negative"),
                     ({"topic": "t", "offset": "1", "timestamp": "2"}, "not both"),
                     ({"topic": "t", "format": "base64"}, "text or hex")]:
        with pytest.raises(data.BadRequest, match=why):
            data.browse_query(bad)


def test_bytes_as_text_or_hex():
    assert data.show_bytes(None, "text") is None
    assert data.show_bytes(b"caf\xc3\xa9", "text") == "café"
    assert data.show_bytes(b"\x00\xffA\x1b\n", "text") == "\\x00\\xffA\\x1b\n"   # visible
    assert data.show_bytes(b"\x00\xffA", "hex") == "00 ff 41"


def test_consumer_props_keep_security_but_never_join_a_group_or_commit():
    props = data.consumer_props({"bootstrap.servers": "b:1", "group.id": "g",
                                 "security.protocol": "SASL_SSL", "group.instance.id": "i"})
    assert props["security.protocol"] == "SASL_SSL" and "group.id" not in props
    assert "group.instance.id" not in props and props["enable.auto.commit"] is False


def test_reassignments_and_balancer_page():
    d = {"moves": {"reassignments": [{"topic": "t", "partition": 0, "replicas": [1, 2, 3],
                                      "adding": [3], "removing": [1], "leader": 2,
                                      "leader_size": 4096, "adding_sizes": {3: 1024}}]},
         "balancer": {"state": "moving", "reason": "2 moves <in flight>", "enabled": True,
                      "max_moves": 4, "threshold": 1, "disk_threshold_percent": 20,
                      "moves_in_progress": 1,
                      "brokers": [{"id": 1, "replicas": 3, "preferred_leaders": 1,
                                   "disk_bytes": None}],
                      "moves": [{"topic": "t", "partition": 1, "target": [2, 3], "why": "count"}]}}
    page = views.reassignments_page(d)
    assert "<td>3: 1.0 KiB (25%)</td>" in page
    assert '<b class="balancer-state">moving</b> — 2 moves &lt;in flight&gt;' in page
    assert "<td>t</td><td>1</td><td>2, 3</td><td>count</td>" in page
    refused = views.reassignments_page({"moves": {"error": "denied"}, "balancer": {"error": "x"}})
    assert refused.count('class="error"') == 2


def test_throughput_is_offset_growth_over_time_per_topic():
    a, b = TopicPartition("a", 0), TopicPartition("a", 1)
    c = TopicPartition("c", 0)
    h = History(keep=10)
    h.add(Sample(100.0, {a: 10, b: 0, c: 50}, 2.0))
    h.add(Sample(102.0, {a: 30, b: 10, c: 40}, 3.0))        # c truncated: counts 0, not -5/s
    h.add(Sample(103.0, {}, None, "KafkaTimeoutError: slow"))   # a failed round: a gap
    h.add(Sample(104.0, {a: 30, b: 10, c: 40, TopicPartition("new", 0): 99}, 4.0))
    s = h.series()
    assert s["t"] == [102.0, 104.0]
    assert s["topics"] == {"a": [15.0, 0.0], "c": [0.0, 0.0], "new": [0.0, 0.0]}
    assert s["total"] == [15.0, 0.0]
    assert s["latency_ms"] == [2.0, 3.0, 4.0] and s["latency_t"] == [100.0, 102.0, 104.0]
    assert s["error"] is None
    h.add(Sample(105.0, {}, None, "denied"))
    assert h.series()["error"] == "denied"


def test_history_keeps_the_last_samples_only():
    h = History(keep=3)
    for i in range(10):
        h.add(Sample(float(i), {TopicPartition("t", 0): i * 5}, 1.0))
    s = h.series()
    assert s["t"] == [8.0, 9.0] and s["total"] == [5.0, 5.0]


def test_console_command_errors_are_one_line_and_an_exit_code(capsys, tmp_path):
    from clients.cli.main import main
    assert main(["console", "--bootstrap-server", "127.0.0.1:1", "--port", "0"]) == 3
    assert main(["console", "--command-config", "/no/such/file.properties"]) == 2
    assert main(["console", "--port", "70000"]) == 2
    (tmp_path / "bad.properties").write_text("default.api.timeout.ms=abc\n")
    assert main(["console", "--command-config", str(tmp_path / "bad.properties")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 4 and all(line.startswith("raftka console: ") for line in err), err
    assert "default.api.timeout.ms" in err[3]
    assert "cannot reach the cluster" in err[0] and "/no/such/file.properties" in err[1]
