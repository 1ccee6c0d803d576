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

  // duration formats whole seconds as "1d 2h", "3h 4m", "5m 6s" or "7s".
  function duration(s) {
    const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600),
      m = Math.floor(s % 3600 / 60), sec = s % 60;
    if (d) return d + "d " + h + "h";
    if (h) return h + "h " + m + "m";
    if (m) return m + "m " + sec + "s";
    return sec + "s";
  }

  function badge(parent, text, cls) {
    const b = document.createElement("span");
    b.className = "badge " + cls;
    b.textContent = text;
    parent.appendChild(b);
    parent.appendChild(document.createTextNode(" "));
  }

  const stateClass = { up: "ok", down: "bad", quarantined: "warn", repairing: "warn" };

  function showReady(r) {
    const badgeEl = document.getElementById("ready");
    const names = { ready: "ready", no_quorum: "no quorum", shutting_down: "shutting down" };
    badgeEl.textContent = names[r.status] || r.status;
    badgeEl.className = "badge " + (r.ready ? "ok" : r.status === "shutting_down" ? "warn" : "bad");
    const q = r.quorum;
    document.getElementById("quorum").textContent =
      q.counting + " of " + q.masters + " masters counting, " + q.needed + " needed (" +
      q.up + " up)" + (q.available ? "" : " — no quorum: locks cannot be granted");
    fill("masters", r.masters.map(function (m) {
      const tr = document.createElement("tr");
      cell(tr, String(m.index), "num");
      cell(tr, m.addr);
      const st = cell(tr, "");
      badge(st, m.state, stateClass[m.state] || "bad");
      if (m.drifting) badge(st, "drifting", "warn");
      if (m.quarantine_left_s > 0) {
        const why = document.createElement("div");
        why.className = "why";
        why.textContent = "quarantined " + duration(m.quarantine_left_s) + " more: " + m.quarantine_reason;
        st.appendChild(why);
      }
      cell(tr, m.counts ? "counts" : "excluded", m.counts ? "" : "muted");
      cell(tr, m.checked_at_ms ? m.clock_offset_ms.toFixed(3) : "–", "num");
      cell(tr, m.checked_at_ms ? (1000 * m.drift_ratio).toFixed(3) : "–", "num");
      cell(tr, m.run_id || "–");
      const w = cell(tr, "");
      if (m.warnings && m.warnings.length) {
        const ul = document.createElement("ul");
        ul.className = "warnlist";
        m.warnings.forEach(function (text) {
          const li = document.createElement("li");
          li.textContent = text;
          ul.appendChild(li);
        });
        w.appendChild(ul);
      } else {
        w.textContent = "none";
        w.className = "muted";
      }
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
