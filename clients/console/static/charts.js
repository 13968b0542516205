// Throughput and latency charts: polls /api/traffic and draws lines on <canvas>, no library.
(function () {
  "use strict";
  var COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4d7c0f",
                "#be185d"];

  function draw(canvas, times, series, unit) {
    var ctx = canvas.getContext("2d"), w = canvas.width, h = canvas.height, pad = 46;
    ctx.clearRect(0, 0, w, h);
    ctx.font = "12px sans-serif";
    ctx.fillStyle = "#555";
    var max = 0;
    series.forEach(function (s) { s.values.forEach(function (v) { if (v > max) max = v; }); });
    max = max > 0 ? max * 1.1 : 1;
    ctx.strokeStyle = "#ddd";
    for (var i = 0; i <= 4; i++) {
      var y = h - pad + (-(h - 2 * pad) * i) / 4;
      ctx.beginPath(); ctx.moveTo(pad, y); ctx.lineTo(w - 10, y); ctx.stroke();
      ctx.fillText((max * i / 4).toFixed(max < 10 ? 1 : 0) + unit, 2, y + 4);
    }
    if (times.length < 1) return;
    var t0 = times[0], t1 = times[times.length - 1], span = Math.max(t1 - t0, 1);
    ctx.fillText(new Date(t0 * 1000).toLocaleTimeString(), pad, h - pad + 18);
    ctx.fillText(new Date(t1 * 1000).toLocaleTimeString(), w - 90, h - pad + 18);
    series.forEach(function (s, k) {
      ctx.strokeStyle = COLORS[k % COLORS.length];
      ctx.lineWidth = 2;
      ctx.beginPath();
      s.values.forEach(function (v, j) {
        var x = pad + ((times[j] - t0) / span) * (w - pad - 10);
        var y = h - pad - ((v || 0) / max) * (h - 2 * pad);
        if (j === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
      });
      ctx.stroke();
    });
  }

  function legend(series) {
    var box = document.getElementById("legend");
    box.textContent = "";
    series.forEach(function (s, k) {
      var item = document.createElement("span");
      item.className = "legend-item";
      item.style.borderColor = COLORS[k % COLORS.length];
      var last = s.values.length ? s.values[s.values.length - 1] : 0;
      item.textContent = s.name + ": " + last.toFixed(1) + "/s";   // textContent: no HTML
      box.appendChild(item);
    });
  }

  function render(d) {
    var series = [{name: "all topics", values: d.total}];
    Object.keys(d.topics).sort().forEach(function (name) {
      series.push({name: name, values: d.topics[name]});
    });
    draw(document.getElementById("throughput"), d.t, series, "");
    legend(series);
    draw(document.getElementById("latency"), d.latency_t,
         [{name: "ListOffsets round trip", values: d.latency_ms}], " ms");
    var status = document.getElementById("chart-status");
    status.textContent = d.error ? "last sample failed: " + d.error :
      d.latency_ms.length + " sample(s), last " +
      (d.latency_ms.length ? d.latency_ms[d.latency_ms.length - 1] + " ms" : "-");
    document.body.setAttribute("data-samples", String(d.latency_ms.length));
  }

  function poll() {
    fetch("/api/traffic", {cache: "no-store"})
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.json();
      })
      .then(render)
      .catch(function (e) {
        document.getElementById("chart-status").textContent = "cannot load samples: " + e;
      })
      .then(function () { setTimeout(poll, 2000); });
  }
  poll();
})();
