package dashtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// artifactDir is where the screenshots go: $REDLOCK_ARTIFACTS, or
// dist/screenshots in the repository.
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("REDLOCK_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(repoRoot, "dist", "screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// countdownRe is a quarantine countdown as the page writes it.
var countdownRe = regexp.MustCompile(`^(?:(\d+)m )?(\d+)s left$`)

// TestDashboardInBrowser drives the daemon's page at / in headless
// Chromium against dev-style masters under a small workload: five masters
// shown, every chart has points, an evicting maxmemory-policy shows as a
// warning on its master, a master whose memory is full shows oom with the
// reason, a master whose clock runs fast shows drifting; a
// killed master shows down within 3 s; a
// master restarted empty shows quarantined with a countdown. It saves
// screenshots at 1280×800 and 390×844, then restarts the daemon: the page
// recovers and starts over with the new, empty history.
func TestDashboardInBrowser(t *testing.T) {
	chromium := need(t, "chromium", "chromium", "REDLOCK_REQUIRE_BROWSER")
	redisCLI := need(t, "redis-cli", "redis-tools", "REDLOCK_REQUIRE_BROWSER")
	d := startDeployment(t)
	ctx, cancel := context.WithCancel(t.Context())
	wait := d.workload(ctx)
	t.Cleanup(func() { cancel(); wait() })
	// A lock that outlives the restart below: whatever rule decides how
	// long a master restarted empty stays out, a granted TTL of 300 s
	// keeps it out long enough to be seen.
	if _, err := d.lock(t.Context(), `{"action":"acquire","key":"dashtest:long","ttl":300}`); err != nil {
		t.Fatal(err)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 800),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()
	// The first Run starts the browser, on a context without a timeout.
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	step(t, bctx, "open the page", 30*time.Second, chromedp.Steps(
		chromedp.Navigate(d.url+"/"),
		chromedp.WaitVisible(chromedp.CSS("#masters .master")),
	))
	if n := step(t, bctx, "count masters", 10*time.Second, chromedp.Evaluate[int](`document.querySelectorAll("#masters .master").length`)); n != 5 {
		t.Fatalf("page shows %d masters, want 5", n)
	}
	// The master group (the deployment's master_groups): its quorum, its
	// masters' states and, from the second reading of its counters on,
	// the calls per second the workload sends it.
	poll(t, bctx, "the groups table shows the group's calls per second", 30*time.Second, `(function () {
		const rows = document.querySelectorAll("#groups tbody tr");
		if (document.getElementById("groups-box").hidden || rows.length !== 1) return false;
		const td = rows[0].querySelectorAll("td");
		return td[0].textContent === "default" && /^5 of 5 counting, 3 needed/.test(td[1].textContent) &&
			/up/.test(td[2].textContent) && parseFloat(td[3].textContent) > 0;
	})()`)
	// Every chart gets points once a few samples are in (one a second).
	// (All but the chart of acquires with wait_ms: none yet.)
	poll(t, bctx, "charts have points", 30*time.Second, `(function () {
		const svgs = document.querySelectorAll(".chart svg");
		return svgs.length === 8 && Array.from(svgs).every(function (s) { return s.parentNode.id === "c-wait" || +s.getAttribute("data-points") >= 3; }) &&
			document.querySelectorAll(".chart svg path, .chart svg rect").length > 0;
	})()`)
	// One acquire with wait_ms, alone in its second: charted apart from the
	// acquire latency, as a dot (a sample with no neighbour has no line).
	if _, err := d.lock(t.Context(), `{"action":"acquire","key":"dashtest:waited","ttl":5,"wait_ms":1000}`); err != nil {
		t.Fatal(err)
	}
	poll(t, bctx, "a lone waited acquire shows as a dot", 10*time.Second,
		`+document.querySelector("#c-wait svg").getAttribute("data-points") >= 1 && document.querySelectorAll("#c-wait svg circle").length >= 1`)
	points := step(t, bctx, "read points", 10*time.Second, chromedp.Evaluate[map[string]int](`Object.fromEntries(Array.from(document.querySelectorAll(".chart")).map(function (c) {
		return [c.id, +c.querySelector("svg").getAttribute("data-points")];
	}))`))
	t.Logf("points per chart: %v", points)

	// The accounts table shows the account's limits as GET /v1/stats has
	// them: a quota with calls left, the rate, and no refusals.
	poll(t, bctx, "accounts table", 10*time.Second, `(function () {
		const rows = document.querySelectorAll("#accounts tbody tr");
		if (document.getElementById("accounts-box").hidden || rows.length !== 1) return false;
		const c = Array.from(rows[0].cells).map(function (td) { return td.textContent; });
		return c[0] === "dash" && / \/ 1000000000$/.test(c[1]) && c[3] === "100000/s (100000)" && / \/ 100000$/.test(c[5]) && c[6] === "0 · 0 · 0";
	})()`)

	// An evicting maxmemory-policy on master 3: the page shows the warning
	// on that master's card.
	m3 := d.masters[3]
	for _, args := range [][]string{{"maxmemory", "104857600"}, {"maxmemory-policy", "allkeys-lru"}} {
		out, err := exec.Command(redisCLI, "-p", strconv.Itoa(m3.Port()), "config", "set", args[0], args[1]).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "OK" {
			t.Fatalf("redis-cli config set %s %s: %v: %s", args[0], args[1], err, out)
		}
	}
	poll(t, bctx, "eviction warning on master 3", 10*time.Second,
		`Array.from(document.querySelectorAll('#masters .master[data-index="3"] .warnings li')).some(function (li) { return li.textContent.indexOf("allkeys-lru") >= 0; })`)

	// Master 1's memory is full (maxmemory below what it uses, noeviction):
	// it refuses writes, and the page shows it as oom with the reason, in
	// the state band too, until the limit is lifted.
	m1 := d.masters[1]
	configSet := func(port int, name, value string) {
		t.Helper()
		out, err := exec.Command(redisCLI, "-p", strconv.Itoa(port), "config", "set", name, value).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "OK" {
			t.Fatalf("redis-cli config set %s %s: %v: %s", name, value, err, out)
		}
	}
	configSet(m1.Port(), "maxmemory-policy", "noeviction")
	configSet(m1.Port(), "maxmemory", "102400")
	poll(t, bctx, "master 1 shows oom with the reason", 10*time.Second,
		`(document.querySelector('#masters .master[data-index="1"] .state') || {}).textContent === "oom" &&
		 (document.querySelector('#masters .master[data-index="1"] .oom .reason') || {textContent: ""}).textContent.indexOf("maxmemory") >= 0 &&
		 document.querySelectorAll('#c-states rect[data-state="oom"]').length > 0`)
	// The quorum line and the group's row count it out of the margin: a
	// master refusing writes cannot vote for an acquire (a black-box pass:
	// the group table and the Grafana margin counted it in).
	poll(t, bctx, "the quorum and the group's row leave master 1 out of the margin", 10*time.Second, `(function () {
		const td = document.querySelectorAll("#groups tbody tr td");
		return /1 refusing writes \(OOM\)\) — can lose 1 more/.test(document.getElementById("quorum").textContent) &&
			td.length > 1 && /\(1 refusing writes, OOM\) — can lose 1 more/.test(td[1].textContent);
	})()`)
	t.Logf("master 1: %s", step(t, bctx, "read the oom reason", 10*time.Second,
		chromedp.Text(chromedp.CSS(`#masters .master[data-index="1"] .oom .reason`))))
	configSet(m1.Port(), "maxmemory", "0")
	poll(t, bctx, "master 1 back up once memory is free", 10*time.Second,
		`(document.querySelector('#masters .master[data-index="1"] .state') || {}).textContent === "up"`)

	// Master 4's clock runs 5% fast, five times the drift factor: the page
	// marks it drifting, on its card and in the state band.
	if err := d.clock4.SetRate(1.05); err != nil {
		t.Fatal(err)
	}
	poll(t, bctx, "master 4 shows drifting", 30*time.Second,
		`!!document.querySelector('#masters .master[data-index="4"].drifting') && document.querySelectorAll('#c-states rect[data-state="drifting"]').length > 0`)

	// Kill master 2: the page must say so within 3 s (health probe every
	// second, page refresh every second).
	victim := d.masters[2]
	stateIs := func(i int, state string) string {
		return fmt.Sprintf(`(document.querySelector('#masters .master[data-index="%d"] .state') || {}).textContent === %q`, i, state)
	}
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	poll(t, bctx, "killed master shows down within 3s", 3*time.Second, stateIs(2, "down"))
	t.Logf("killed master shown down after %v", time.Since(killed).Round(time.Millisecond))

	// Restart it empty: a new run_id, so it is quarantined, with a
	// countdown and a reason.
	if err := victim.Restart(); err != nil {
		t.Fatal(err)
	}
	poll(t, bctx, "restarted master shows quarantined", 15*time.Second, stateIs(2, "quarantined"))
	countdown := step(t, bctx, "read countdown", 10*time.Second, chromedp.Text(chromedp.CSS(`#masters .master[data-index="2"] .countdown`)))
	reason := step(t, bctx, "read reason", 10*time.Second, chromedp.Text(chromedp.CSS(`#masters .master[data-index="2"] .reason`)))
	m := countdownRe.FindStringSubmatch(countdown)
	if m == nil {
		t.Fatalf("countdown %q, want like \"9m 58s left\"", countdown)
	}
	mins, _ := strconv.Atoi(m[1])
	secs, _ := strconv.Atoi(m[2])
	if left := 60*mins + secs; left <= 0 || left > 600 {
		t.Fatalf("countdown %q: %d s, want 1 to max_ttl (600)", countdown, left)
	}
	if reason == "" {
		t.Fatal("quarantined master without a reason")
	}
	t.Logf("master 2: quarantined, %s: %s", countdown, reason)
	// The state band shows the outage and the quarantine too.
	poll(t, bctx, "state band shows down and quarantined", 10*time.Second,
		`document.querySelectorAll('#c-states rect[data-state="quarantined"]').length > 0 && document.querySelectorAll('#c-states rect[data-state="down"]').length > 0`)

	dir := artifactDir(t)
	for _, size := range [][2]int64{{1280, 800}, {390, 844}} {
		name := fmt.Sprintf("dashboard-%dx%d.png", size[0], size[1])
		step(t, bctx, "resize to "+name, 10*time.Second, chromedp.EmulateViewport(size[0], size[1]))
		// Wait until the charts are redrawn for the new width.
		poll(t, bctx, "charts redrawn at "+name, 10*time.Second, `Array.from(document.querySelectorAll(".chart svg")).every(function (s) {
			return Math.abs(s.viewBox.baseVal.width - Math.max(200, s.parentElement.clientWidth - 14)) < 1;
		})`)
		png := step(t, bctx, "screenshot "+name, 30*time.Second, chromedp.CaptureScreenshot())
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", path, len(png))
	}
	// At phone width nothing may be wider than the screen.
	if overflow := step(t, bctx, "measure width at 390", 10*time.Second, chromedp.Evaluate[int](`document.documentElement.scrollWidth - window.innerWidth`)); overflow > 0 {
		t.Errorf("at 390×844 the page is %d px wider than the screen", overflow)
	}

	// The daemon restarts: the page says it cannot reach it, then carries
	// on with the new daemon's history, which starts empty (no trace of
	// master 2's outage, which the new daemon never saw).
	d.stopDaemon(t)
	poll(t, bctx, "page notices the daemon is gone", 10*time.Second, `document.getElementById("err").textContent !== ""`)
	d.startDaemon(t)
	poll(t, bctx, "page recovers after the daemon restarts", 15*time.Second,
		`document.getElementById("err").textContent === "" && document.querySelectorAll("#masters .master").length === 5 &&
		 document.querySelectorAll('#c-states rect').length > 0 && document.querySelectorAll('#c-states rect[data-state="down"]').length === 0`)
}

// step runs one browser action, bounded by timeout, and fails the test
// with what it was doing if the action fails.
func step[T any](t *testing.T, bctx context.Context, what string, timeout time.Duration, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, timeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// poll waits, up to timeout, until the JavaScript expression is true in
// the page.
func poll(t *testing.T, bctx context.Context, what string, timeout time.Duration, expr string) {
	t.Helper()
	step(t, bctx, what, timeout+time.Second, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
}
