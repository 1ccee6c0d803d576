// The redlockd dashboard. Every second it reads GET /readyz (masters,
// quorum and, with master_groups, each group's now), GET /v1/history?since_ms=… (the samples it has not seen
// yet) and GET /v1/stats (the accounts' limits), keeps the last 15 minutes and draws them as SVG. Every value goes
// into the page through textContent or an attribute, never as HTML.
"use strict";
(function () {
  const pollMS = 1000;
  const SVG = "http://www.w3.org/2000/svg";
  const palette = ["#1565c0", "#2e7d32", "#c62828", "#ef6c00", "#6a1b9a", "#00838f", "#ad1457", "#5d4037", "#9e9d24", "#37474f"];
  const stateColor = { up: "#43a047", down: "#c62828", quarantined: "#ef6c00", repairing: "#8d4a00", waiting: "#90a4ae", oom: "#ad1457", drifting: "#6a1b9a" };
  const stateBadge = { up: "ok", down: "bad", quarantined: "warn", repairing: "warn", waiting: "idle", oom: "bad" };
  // One colour per result, all distinct (daemon/dashboard_test.go checks
  // that every result the daemon counts has its own).
  const resultColor = { acquired: "#2e7d32", not_acquired: "#a5d6a7", released: "#1565c0", not_released: "#90caf9",
    extended: "#00838f", not_extended: "#80deea", held: "#5d4037", not_held: "#bcaaa4", quorum_unavailable: "#c62828",
    bad_request: "#ef6c00", unauthorized: "#ad1457", internal: "#000000", cancelled: "#757575",
    method_not_allowed: "#fbc02d", unsupported_media_type: "#ffab40", too_large: "#1a237e",
    too_many_waiters: "#4dd0e1", timeout: "#ff8a80", auth_limited: "#f06292",
    quota_exhausted: "#6a1b9a", rate_limited: "#ce93d8", too_many_locks: "#d500f9",
    idempotency_answered: "#558b2f", idempotency_conflict: "#ff6f00", records_budget_full: "#827717" };

  let hist = null; // the history the page holds, columns as in /v1/history
  let ready = null; // the last /readyz body

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
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
  function fmt(v) {
    if (v === null || v === undefined || !isFinite(v)) return "–";
    const a = Math.abs(v);
    if (a >= 100) return v.toFixed(0);
    if (a >= 10) return v.toFixed(1);
    if (a >= 1 || a === 0) return v.toFixed(2);
    return v.toPrecision(2);
  }
  function clock(ms) { return new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" }); }

  // ---- history ----

  function freshHistory(h) {
    return {
      started: h.started_ms, interval: h.interval_ms, window: h.window_s * 1000,
      t: h.t_ms.slice(), needed: h.quorum.needed.slice(), counting: h.quorum.counting.slice(), up: h.quorum.up.slice(),
      masters: h.masters.map(function (m) {
        return { addr: m.addr, state: m.state.slice(), drifting: m.drifting.slice(), offset: m.clock_offset_ms.slice(),
          drift: m.drift_ratio.slice(), probe: m.probe_latency_ms.slice() };
      }),
      outcomes: Object.assign({}, h.outcomes_per_s),
      p50: h.acquire_latency_ms.p50.slice(), p99: h.acquire_latency_ms.p99.slice(),
      w50: h.acquire_wait_ms.p50.slice(), w99: h.acquire_wait_ms.p99.slice(),
    };
  }

  // merge appends the samples of h (a /v1/history answer) to hist; a
  // different started_ms means the daemon restarted: start over.
  function merge(h) {
    if (!hist || hist.started !== h.started_ms || hist.masters.length !== h.masters.length) {
      hist = freshHistory(h);
    } else if (h.t_ms.length) {
      const before = hist.t.length, n = h.t_ms.length;
      hist.t.push(...h.t_ms);
      hist.needed.push(...h.quorum.needed);
      hist.counting.push(...h.quorum.counting);
      hist.up.push(...h.quorum.up);
      h.masters.forEach(function (m, i) {
        const x = hist.masters[i];
        x.addr = m.addr;
        x.state.push(...m.state); x.drifting.push(...m.drifting); x.offset.push(...m.clock_offset_ms);
        x.drift.push(...m.drift_ratio); x.probe.push(...m.probe_latency_ms);
      });
      // A result missing on either side had no requests there: zeros.
      Object.keys(h.outcomes_per_s).forEach(function (r) {
        if (!hist.outcomes[r]) hist.outcomes[r] = new Array(before).fill(0);
      });
      Object.keys(hist.outcomes).forEach(function (r) {
        hist.outcomes[r].push(...(h.outcomes_per_s[r] || new Array(n).fill(0)));
      });
      hist.p50.push(...h.acquire_latency_ms.p50);
      hist.p99.push(...h.acquire_latency_ms.p99);
      hist.w50.push(...h.acquire_wait_ms.p50);
      hist.w99.push(...h.acquire_wait_ms.p99);
    }
    trim(h.now_ms - hist.window);
  }

  function trim(oldest) {
    let k = 0;
    while (k < hist.t.length && hist.t[k] < oldest) k++;
    if (!k) return;
    const cut = function (a) { a.splice(0, k); };
    [hist.t, hist.needed, hist.counting, hist.up, hist.p50, hist.p99, hist.w50, hist.w99].forEach(cut);
    hist.masters.forEach(function (m) { [m.state, m.drifting, m.offset, m.drift, m.probe].forEach(cut); });
    Object.keys(hist.outcomes).forEach(function (r) {
      cut(hist.outcomes[r]);
      if (!hist.outcomes[r].some(function (v) { return v; })) delete hist.outcomes[r];
    });
  }

  // ---- charts ----

  function frame(id) {
    const box = document.getElementById(id);
    box.querySelectorAll("svg, .legend, .empty").forEach(function (e) { e.remove(); });
    const w = Math.max(200, box.clientWidth - 14);
    return { box: box, w: w };
  }

  // xScale maps sample times to x between left and w: the chart spans the
  // history it has, at least a minute, at most the window.
  function xScale(left, w) {
    const t = hist.t, last = t[t.length - 1];
    let first = Math.max(t[0], last - hist.window);
    if (last - first < 60000) first = last - 60000;
    return { x: function (ms) { return left + (w - left - 4) * (ms - first) / (last - first); }, first: first, last: last };
  }

  function timeAxis(s, xs, h) {
    s.appendChild(svg("text", { x: xs.x(xs.first), y: h - 2 }, clock(xs.first)));
    s.appendChild(svg("text", { x: xs.x(xs.last), y: h - 2, "text-anchor": "end" }, clock(xs.last)));
  }

  function legend(box, items) {
    const lg = el("div", "legend");
    items.forEach(function (it) {
      const sp = el("span", "", it.name);
      sp.style.setProperty("--c", it.color);
      lg.appendChild(sp);
    });
    box.appendChild(lg);
  }

  // lineChart draws series (each {name, color, values}) against hist.t.
  // opts: zero (include 0 on the y axis), step (draw steps), whole
  // (whole numbers: label only the ends of the axis).
  function lineChart(id, series, opts) {
    const f = frame(id);
    const h = f.box.clientWidth < 500 ? 130 : 150, left = 44, bottom = 14, top = 6;
    const s = svg("svg", { viewBox: "0 0 " + f.w + " " + h, role: "img", "aria-label": f.box.querySelector("h3").textContent });
    const xs = xScale(left, f.w);
    let lo = Infinity, hi = -Infinity;
    series.forEach(function (se) {
      se.values.forEach(function (v, i) {
        if (v !== null && isFinite(v) && hist.t[i] >= xs.first) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
      });
    });
    if (opts.zero) { lo = Math.min(lo, 0); hi = Math.max(hi, 0); }
    if (!isFinite(lo)) { lo = 0; hi = 1; }
    if (opts.whole) hi = Math.ceil(hi + 0.5);
    if (hi - lo < 1e-9) { const pad = Math.abs(hi) > 0 ? Math.abs(hi) * 0.1 : 1; lo -= opts.zero && lo === 0 ? 0 : pad; hi += pad; }
    const y = function (v) { return top + (h - top - bottom) * (hi - v) / (hi - lo); };
    (opts.whole ? [hi, lo] : [hi, (hi + lo) / 2, lo]).forEach(function (v) {
      s.appendChild(svg("line", { x1: left, x2: f.w - 4, y1: y(v), y2: y(v), stroke: "#e3e6ea" }));
      s.appendChild(svg("text", { x: left - 4, y: y(v) + 3, "text-anchor": "end" }, opts.whole ? String(Math.round(v)) : fmt(v)));
    });
    timeAxis(s, xs, h);
    let points = 0;
    const gap = 3 * hist.interval;
    series.forEach(function (se) {
      let d = "", prevT = null, prevY = null, run = [];
      // A sample with no neighbour (one waited acquire in a quiet minute)
      // has no line to be part of: it is drawn as a dot.
      const dots = [];
      const endRun = function () { if (run.length === 1) dots.push(run[0]); run = []; };
      se.values.forEach(function (v, i) {
        const t = hist.t[i];
        if (v === null || !isFinite(v) || t < xs.first) { prevT = null; endRun(); return; }
        const px = xs.x(t).toFixed(1), py = y(v).toFixed(1);
        if (prevT === null || t - prevT > gap) { endRun(); d += "M" + px + " " + py; }
        else if (opts.step) d += "L" + px + " " + prevY + "L" + px + " " + py;
        else d += "L" + px + " " + py;
        run.push([px, py]);
        prevT = t; prevY = py; points++;
      });
      endRun();
      if (d) {
        s.appendChild(svg("path", { d: d, fill: "none", stroke: se.color, "stroke-width": se.width || 1.6,
          "stroke-dasharray": se.dash || "", "stroke-linejoin": "round", "data-series": se.name }));
      }
      dots.forEach(function (p) {
        s.appendChild(svg("circle", { cx: p[0], cy: p[1], r: 2.5, fill: se.color, "data-series": se.name }));
      });
    });
    s.setAttribute("data-points", points);
    f.box.appendChild(s);
    legend(f.box, series);
  }

  function bandState(m, i) {
    const st = m.state[i];
    return m.drifting[i] && st !== "down" ? "drifting" : st;
  }

  // stateChart draws one band per master, coloured by state over time.
  function stateChart(id) {
    const f = frame(id);
    const row = 18, left = 30, bottom = 14, n = hist.masters.length, h = n * row + bottom + 4;
    const s = svg("svg", { viewBox: "0 0 " + f.w + " " + h, role: "img", "aria-label": "master state over time" });
    s.style.height = h + "px";
    const xs = xScale(left, f.w);
    let points = 0;
    hist.masters.forEach(function (m, j) {
      const y0 = 2 + j * row;
      s.appendChild(svg("text", { x: left - 4, y: y0 + row / 2 + 3, "text-anchor": "end" }, "#" + j));
      let i = 0;
      while (i < hist.t.length) {
        if (hist.t[i] < xs.first) { i++; continue; }
        const st = bandState(m, i);
        let k = i + 1;
        while (k < hist.t.length && bandState(m, k) === st && hist.t[k] - hist.t[k - 1] <= 3 * hist.interval) k++;
        const end = k < hist.t.length && hist.t[k] - hist.t[k - 1] <= 3 * hist.interval ? hist.t[k] : hist.t[k - 1] + hist.interval;
        const x0 = xs.x(hist.t[i]), x1 = Math.min(xs.x(end), f.w - 4);
        const r = svg("rect", { x: x0.toFixed(1), y: y0, width: Math.max(1, x1 - x0).toFixed(1), height: row - 4,
          fill: stateColor[st] || "#000", "data-state": st });
        r.appendChild(svg("title", {}, m.addr + ": " + st + " from " + clock(hist.t[i])));
        s.appendChild(r);
        points += k - i;
        i = k;
      }
    });
    timeAxis(s, xs, h);
    s.setAttribute("data-points", points);
    f.box.appendChild(s);
    legend(f.box, ["up", "down", "quarantined", "repairing", "waiting", "oom", "drifting"].map(function (st) {
      return { name: st, color: stateColor[st] };
    }));
  }

  function masterSeries(field, scale) {
    return hist.masters.map(function (m, j) {
      return { name: "#" + j + " " + m.addr, color: palette[j % palette.length],
        values: m[field].map(function (v) { return v === null ? null : v * scale; }) };
    });
  }

  function drawCharts() {
    if (!hist || !hist.t.length) {
      document.querySelectorAll(".chart").forEach(function (box) {
        box.querySelectorAll("svg, .legend, .empty").forEach(function (e) { e.remove(); });
        box.appendChild(el("div", "muted empty", "no samples yet"));
      });
      return;
    }
    stateChart("c-states");
    lineChart("c-quorum", [
      { name: "up", color: "#90a4ae", values: hist.up, width: 3 },
      { name: "needed", color: "#c62828", values: hist.needed, dash: "5 3" },
      { name: "counting", color: "#1565c0", values: hist.counting, width: 2 },
    ], { zero: true, step: true, whole: true });
    lineChart("c-outcomes", Object.keys(hist.outcomes).sort().map(function (r, i) {
      return { name: r, color: resultColor[r] || palette[i % palette.length], values: hist.outcomes[r] };
    }).concat(Object.keys(hist.outcomes).length ? [] : [{ name: "no requests", color: "#cfd8dc", values: hist.t.map(function () { return 0; }) }]),
    { zero: true });
    lineChart("c-latency", [
      { name: "p50", color: "#1565c0", values: hist.p50 },
      { name: "p99", color: "#c62828", values: hist.p99 },
    ], { zero: true });
    lineChart("c-wait", [
      { name: "p50", color: "#1565c0", values: hist.w50 },
      { name: "p99", color: "#c62828", values: hist.w99 },
    ], { zero: true });
    lineChart("c-offset", masterSeries("offset", 1), {});
    lineChart("c-drift", masterSeries("drift", 1000), {});
    lineChart("c-probe", masterSeries("probe", 1), { zero: true });
  }

  // ---- now: quorum, callers, masters ----

  function showReady(r) {
    const badge = document.getElementById("ready");
    const names = { ready: "ready", no_quorum: "no quorum", shutting_down: "shutting down" };
    badge.textContent = names[r.status] || r.status;
    badge.className = "badge " + (r.ready ? "ok" : r.status === "shutting_down" ? "warn" : "bad");
    const q = r.quorum, writable = q.writable === undefined ? q.counting : q.writable, margin = writable - q.needed;
    const qe = document.getElementById("quorum");
    let text = q.counting + " of " + q.masters + " masters counting, " + q.needed + " needed (" + q.up + " up" +
      (writable < q.counting ? ", " + (q.counting - writable) + " refusing writes (OOM)" : "") + ") — ";
    if (margin < 0) { text += "no quorum: locks cannot be granted"; qe.className = "bad"; }
    else if (margin === 0) { text += "margin 0: one more failure stops locking"; qe.className = "warn"; }
    else { text += "can lose " + margin + " more"; qe.className = ""; }
    qe.textContent = text;
    showGroups(r);
    document.getElementById("masters").replaceChildren(...r.masters.map(masterCard));
  }

  // ---- master groups (master_groups only): quorum, masters, calls/s ----

  let lastOps = null; // { at: ms, ops: {group: total calls} } of the previous /readyz

  function showGroups(r) {
    const box = document.getElementById("groups-box");
    if (!r.groups || !r.groups.length) { box.hidden = true; lastOps = null; return; }
    box.hidden = false;
    const now = Date.now(), ops = {};
    const body = document.querySelector("#groups tbody");
    body.replaceChildren(...r.groups.map(function (g) {
      const q = g.quorum, writable = q.writable === undefined ? q.counting : q.writable, margin = writable - q.needed;
      const total = Object.keys(g.ops || {}).reduce(function (s, k) { return s + g.ops[k]; }, 0);
      ops[g.name] = total;
      const tr = el("tr");
      tr.setAttribute("data-group", g.name);
      tr.append(el("td", "", g.name));
      tr.append(el("td", margin < 0 ? "bad" : margin === 0 ? "warn" : "",
        q.counting + " of " + q.masters + " counting, " + q.needed + " needed" +
        (writable < q.counting ? " (" + (q.counting - writable) + " refusing writes, OOM)" : "") + " — " +
        (margin < 0 ? "no quorum: its keys cannot be locked" : margin === 0 ? "margin 0" : "can lose " + margin + " more")));
      const states = {};
      g.masters.forEach(function (m) { states[m.state] = (states[m.state] || 0) + 1; });
      tr.append(el("td", "", Object.keys(states).sort().map(function (st) { return states[st] + " " + st; }).join(", ")));
      // Calls this daemon sent to the group per second, between the last
      // two readings of its counters.
      const prev = lastOps ? lastOps.ops[g.name] : undefined;
      const rate = prev === undefined || now <= lastOps.at ? null : (total - prev) * 1000 / (now - lastOps.at);
      tr.append(el("td", "", rate === null ? "–" : fmt(Math.max(rate, 0))));
      return tr;
    }));
    lastOps = { at: now, ops: ops };
    const p = r.placement;
    document.getElementById("placement").textContent = p && p.phase ? "· placement: " + p.phase : "";
  }

  function masterCard(m) {
    const card = el("div", "master s-" + m.state + (m.drifting ? " drifting" : ""));
    card.setAttribute("data-index", m.index);
    const head = el("div", "head");
    head.appendChild(el("span", "addr", "#" + m.index + " " + m.addr));
    head.appendChild(el("span", "badge state " + (stateBadge[m.state] || "bad"), m.state));
    card.appendChild(head);
    const badges = el("div", "badges");
    badges.appendChild(el("span", "badge vote " + (m.counts ? "ok" : "idle"), m.counts ? "vote counts" : "vote excluded"));
    if (m.group) { badges.appendChild(document.createTextNode(" ")); badges.appendChild(el("span", "badge idle group", "group " + m.group)); }
    if (m.drifting) { badges.appendChild(document.createTextNode(" ")); badges.appendChild(el("span", "badge info", "drifting")); }
    card.appendChild(badges);
    if (m.quarantine_left_s > 0 || m.state === "repairing") {
      const q = el("div", "quarantine");
      if (m.state === "repairing") {
        // No countdown: a repairing master does not come back by itself
        // when a time runs out, only after its fencing counter is repaired
        // (then its quarantine, if any, starts).
        q.appendChild(el("span", "countdown", "awaiting fencing repair"));
      } else {
        q.appendChild(document.createTextNode("quarantined, "));
        q.appendChild(el("span", "countdown", duration(m.quarantine_left_s) + " left"));
      }
      if (m.quarantine_reason) q.appendChild(el("div", "reason", m.quarantine_reason));
      if (m.state === "repairing") {
        q.appendChild(el("div", "reason muted", "repaired from a quorum automatically; if most masters lost their data, run redlockd repair-fences"));
      }
      card.appendChild(q);
    }
    if (m.refusing_writes) {
      const o = el("div", "quarantine oom");
      o.appendChild(el("span", "countdown", "refusing writes (OOM)"));
      if (m.write_refusal) o.appendChild(el("div", "reason", m.write_refusal));
      card.appendChild(o);
    }
    const dl = el("dl");
    const row = function (k, v) { dl.appendChild(el("dt", "", k)); dl.appendChild(el("dd", "", v)); };
    const probed = !!m.checked_at_ms;
    // A down master's offset and drift are its last readings, not current.
    const current = probed && m.state !== "down";
    row("clock offset", current ? m.clock_offset_ms.toFixed(3) + " ms" : probed ? "– (down; last " + m.clock_offset_ms.toFixed(3) + " ms)" : "–");
    row("drift", current ? (1000 * m.drift_ratio).toFixed(3) + " ms/s" : probed ? "– (down; last " + (1000 * m.drift_ratio).toFixed(3) + " ms/s)" : "–");
    row("probe", m.state === "down" ? "–" : m.latency_ms.toFixed(3) + " ms");
    row("run id", m.run_id || "–");
    row("checked", probed ? clock(m.checked_at_ms) : "not yet");
    card.appendChild(dl);
    if (m.warnings && m.warnings.length) {
      const ul = el("ul", "warnings");
      m.warnings.forEach(function (w) { ul.appendChild(el("li", "", w)); });
      card.appendChild(ul);
    }
    if (m.last_error) card.appendChild(el("div", "lasterr", "last error: " + m.last_error));
    return card;
  }

  // showCallers sums the last ten seconds of outcomes.
  function showCallers() {
    const c = document.getElementById("callers");
    if (!hist || !hist.t.length) { c.textContent = "callers: no samples yet"; return; }
    const n = hist.t.length, from = Math.max(0, n - 10);
    const mean = function (a) {
      let s = 0, k = 0;
      for (let i = from; i < n; i++) if (a[i] !== null && isFinite(a[i])) { s += a[i]; k++; }
      return k ? s / k : 0;
    };
    const rate = function (r) { return hist.outcomes[r] ? mean(hist.outcomes[r]) : 0; };
    const lastOf = function (a) { for (let i = n - 1; i >= from; i--) if (a[i] !== null) return a[i]; return null; };
    c.textContent = "callers, last 10 s: " + fmt(rate("acquired")) + " granted/s · " + fmt(rate("not_acquired")) +
      " refused (held)/s · " + fmt(rate("quorum_unavailable")) + " 503/s · acquire p50 " + fmt(lastOf(hist.p50)) +
      " ms, p99 " + fmt(lastOf(hist.p99)) + " ms";
    c.className = rate("quorum_unavailable") > 0 ? "alert" : "";
  }

  // ---- accounts ----

  // showAccounts fills the accounts table from GET /v1/stats: quota left
  // (red under a tenth), rate and bucket, held locks against max_locks, and
  // the calls refused by each limit since the daemon started.
  function showAccounts(st) {
    const box = document.getElementById("accounts-box");
    const names = Object.keys((st && st.accounts) || {}).sort();
    box.hidden = names.length === 0;
    const body = document.querySelector("#accounts tbody");
    body.replaceChildren();
    names.forEach(function (n) {
      const a = st.accounts[n];
      const tr = el("tr");
      tr.append(el("td", "", n));
      const q = el("td", "", a.quota_limit === undefined ? "unlimited" : a.quota_remaining + " / " + a.quota_limit);
      if (a.quota_limit !== undefined && a.quota_remaining * 10 < a.quota_limit) q.className = "low";
      tr.append(q);
      tr.append(el("td", "", a.quota_resets_at === undefined ? "–" : new Date(a.quota_resets_at * 1000).toLocaleString()));
      tr.append(el("td", "", a.rate === undefined ? "unlimited" : a.rate + "/s (" + a.burst + ")"));
      tr.append(el("td", "", a.rate_tokens === undefined ? "–" : fmt(a.rate_tokens)));
      tr.append(el("td", "", a.max_locks === undefined ? "no cap" : a.locks_held + " / " + a.max_locks));
      tr.append(el("td", "", a.quota_exhausted + " · " + a.rate_limited + " · " + a.too_many_locks));
      body.append(tr);
    });
  }

  // ---- loop ----

  async function getJSON(url) {
    const x = await fetch(url, { cache: "no-store" });
    // /readyz answers 503 with the same body when not ready.
    if (!x.ok && x.status !== 503) throw new Error(url + ": HTTP " + x.status);
    return x.json();
  }

  async function refresh() {
    try {
      const since = hist && hist.t.length ? "?since_ms=" + hist.t[hist.t.length - 1] : "";
      const [r, h, st] = await Promise.all([getJSON("readyz"), getJSON("v1/history" + since), getJSON("v1/stats")]);
      ready = r;
      merge(h);
      showReady(r);
      showAccounts(st);
      showCallers();
      drawCharts();
      document.getElementById("updated").textContent = new Date().toLocaleTimeString();
      document.getElementById("err").textContent = "";
    } catch (e) {
      document.getElementById("err").textContent = "· cannot reach the daemon: " + e.message;
    }
    setTimeout(refresh, pollMS);
  }

  let resizeTimer = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () { if (ready) drawCharts(); }, 150);
  });
  refresh();
})();
