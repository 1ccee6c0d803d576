// The redlockd dashboard: polls /readyz and /v1/stats every two seconds.
// Every value goes into the page through textContent, never as HTML.
"use strict";
(function () {
  const interval = 2000;
  let prev = null; // the previous /v1/stats reading, for rates

  function cell(tr, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }

  function fill(id, rows) {
    const body = document.getElementById(id);
    body.replaceChildren(...rows);
  }

  function showReady(r) {
    const badge = document.getElementById("ready");
    const names = { ready: "ready", no_quorum: "no quorum", shutting_down: "shutting down" };
    badge.textContent = names[r.status] || r.status;
    badge.className = "badge " + (r.ready ? "ok" : r.status === "shutting_down" ? "warn" : "bad");
    document.getElementById("quorum").textContent =
      r.quorum.up + " of " + r.quorum.masters + " masters up, " + r.quorum.needed + " needed";
    fill("masters", r.masters.map(function (m) {
      const tr = document.createElement("tr");
      cell(tr, String(m.index), "num");
      cell(tr, m.addr);
      const st = cell(tr, "");
      const b = document.createElement("span");
      b.className = "badge " + (m.state === "up" ? "ok" : "bad");
      b.textContent = m.state;
      st.appendChild(b);
      cell(tr, m.latency_ms.toFixed(3), "num");
      cell(tr, m.checked_at_ms ? new Date(m.checked_at_ms).toLocaleTimeString() : "not yet");
      cell(tr, m.last_error || "");
      return tr;
    }));
  }

  function showStats(s) {
    const dt = prev ? s.uptime_seconds - prev.uptime_seconds : 0;
    const rows = [];
    Object.keys(s.requests).sort().forEach(function (action) {
      Object.keys(s.requests[action]).sort().forEach(function (result) {
        const n = s.requests[action][result];
        const before = prev && prev.requests[action] ? prev.requests[action][result] || 0 : 0;
        const tr = document.createElement("tr");
        cell(tr, action);
        cell(tr, result);
        cell(tr, String(n), "num");
        cell(tr, dt > 0 ? ((n - before) / dt).toFixed(1) : "–", "num");
        rows.push(tr);
      });
    });
    fill("outcomes", rows.length ? rows : [emptyRow(4, "no requests yet")]);
    const lat = [];
    Object.keys(s.duration).sort().forEach(function (action) {
      const d = s.duration[action];
      const p = prev && prev.duration[action] ? prev.duration[action] : { count: 0, sum_seconds: 0 };
      const tr = document.createElement("tr");
      cell(tr, action);
      cell(tr, String(d.count), "num");
      cell(tr, (1000 * d.sum_seconds / d.count).toFixed(3), "num");
      const dn = d.count - p.count;
      cell(tr, prev && dn > 0 ? (1000 * (d.sum_seconds - p.sum_seconds) / dn).toFixed(3) : "–", "num");
      lat.push(tr);
    });
    fill("latency", lat.length ? lat : [emptyRow(4, "no requests yet")]);
    prev = s;
  }

  function emptyRow(cols, text) {
    const tr = document.createElement("tr");
    const td = cell(tr, text, "muted");
    td.colSpan = cols;
    return tr;
  }

  async function refresh() {
    try {
      // /readyz answers 503 with the same body when not ready.
      const [r, s] = await Promise.all([
        fetch("readyz", { cache: "no-store" }).then(function (x) { return x.json(); }),
        fetch("v1/stats", { cache: "no-store" }).then(function (x) { return x.json(); }),
      ]);
      showReady(r);
      showStats(s);
      document.getElementById("updated").textContent = new Date().toLocaleTimeString();
      document.getElementById("err").textContent = "";
    } catch (e) {
      document.getElementById("err").textContent = "· cannot reach the daemon: " + e;
    }
  }

  refresh();
  setInterval(refresh, interval);
})();
