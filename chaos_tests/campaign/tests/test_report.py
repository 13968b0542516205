"""The report: verdicts, anomalies with the operations they name, and an SVG timeline whose
fault windows and series come from the round (a round built by hand, no cluster)."""

import json

from chaos_tests.campaign import report
from chaos_tests.campaign.runner import RoundResult
from chaos_tests.campaign.schedule import FaultStep
from chaos_tests.checkers import OK, History, check_all
from chaos_tests.checkers.ops import OpLog


def a_round():
    history, log = History(), OpLog()
    t0 = 100.0
    for n in range(40):
        start = t0 + n * 0.1
        i = log.invoke("w", "produce", f"w-{n}", start)
        log.complete(i, "ok", start + (0.5 if 10 <= n < 20 else 0.01), result=n)
        history.produce(f"w-{n}", 0, OK, n, process="w", time=start + 0.01)
        if n != 13:                                  # w-13 acknowledged, then lost
            history.consume(f"w-{n}", 0, n, final=True)
    steps = [FaultStep("kill", ("broker-1",), 1.0, 1.0), FaultStep("isolate", ("broker-2",), 2.5, 1.0)]
    return RoundResult(0, 99, steps, check_all(history, idempotent=True), history, log,
                       History(), t0,
                       [(1.0, 2.1, steps[0].label()), (2.5, 3.4, steps[1].label())])


def test_round_record_names_the_anomaly_and_its_operations():
    rec = report.round_record(a_round())
    assert rec["ok"] is False and rec["operations"] == {"produce:ok": 40}
    lost = next(c for c in rec["checkers"] if c["name"] == "lost-write")
    assert not lost["ok"] and lost["anomaly_count"] == 1
    anomaly = lost["anomalies"][0]
    assert "'w-13'" in anomaly["message"]
    assert anomaly["ops"] == [{"kind": "produce", "value": "w-13", "partition": 0, "process": "w",
                               "time": 101.31, "outcome": "ok", "offset": 13, "error": None}]
    assert all(c["ok"] for c in rec["checkers"] if c["name"] not in ("lost-write",))


def test_timeline_buckets_throughput_and_latency():
    series = report.timeline(a_round().log, 100.0)["series"]
    assert sum(s["throughput"] for s in series) * report.BUCKET_S == 40
    slow = [s for s in series if s["latency_max_ms"] and s["latency_max_ms"] > 400]
    assert slow and all(1.0 <= s["t"] <= 2.5 for s in slow)     # the 500 ms answers


def test_svg_shades_each_fault_window_and_draws_the_series():
    svg = report.svg(report.round_record(a_round()))
    assert svg.count('class="fault"') == 2
    assert "kill(broker-1)@1.0s+1.0s" in svg and "isolate(broker-2)" in svg
    for series in ("throughput", "latency_mean_ms", "latency_max_ms"):
        assert f'class="{series}"' in svg
    assert svg.startswith("<svg") and svg.endswith("</svg>")


def test_written_report_json_and_html(tmp_path):
    rec = report.round_record(a_round())
    full = {"seed": 1, "faults": ["kill", "isolate"], "rounds": [rec], "summary": "1 round",
            "shrunk": {"round": 0, "runs": 3, "schedule": rec["schedule"][:1],
                       "command": "python -m chaos_tests.campaign --schedule '[...]'"}}
    j, h = report.write(full, tmp_path / "out")
    assert json.loads(j.read_text())["rounds"][0]["checkers"] == rec["checkers"]
    page = h.read_text()
    assert "ANOMALY" in page and "<svg" in page and "Shrunk failing schedule" in page
    assert "acked &#x27;w-13&#x27; at 0/13 is missing" in page
