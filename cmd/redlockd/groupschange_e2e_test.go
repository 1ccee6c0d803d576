package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/config"
	"github.com/redlockd/redlockd/internal/redisproc"
	"github.com/redlockd/redlockd/redlock"
)

// TestChangingMasterGroups: a deployment on one masters list (the group
// "default") gains the group g1, with three daemons of the three phases
// over the same real masters: old (masters only), moving
// (previous_master_groups), new (master_groups only). A moved key locked
// through any of them is refused by the others that may run at the same
// time; the moving daemon locks it in both groups under one token; the
// fences go up across the phases although g1's counter started far below
// default's; and groups-change reports each step.
func TestChangingMasterGroups(t *testing.T) {
	ch := newGroupChange(t, "chg", 2)
	prefix, key := ch.prefix, ch.movedKey(t)
	dOld, stopOld := startDaemon(t, ch.common, func(c *config.Config) { c.Masters = ch.a })
	dMoving := ch.moving(t)
	rk := lockRedisKey(prefix, "acme", key)
	refusal := "" // why the last acquire was refused, for the failure messages
	acquire := func(base string) (bool, string, int64) {
		t.Helper()
		code, env, _ := post(t, lockURL(base), keyA, fmt.Sprintf(`{"key":%q,"ttl":2}`, key))
		require.Equal(t, http.StatusOK, code, env.Msg)
		if env.Data["acquired"] != true {
			refusal = fmt.Sprintf("%s %v", env.Msg, env.Data)
			return false, "", 0
		}
		return true, env.Data["token"].(string), int64(env.Data["fence"].(float64))
	}
	release := func(base, token string) {
		t.Helper()
		code, env, _ := post(t, lockURL(base), keyA, fmt.Sprintf(`{"key":%q,"action":"release","token":%q}`, key, token))
		require.Equal(t, http.StatusOK, code, env.Msg)
		require.Equal(t, true, env.Data["released"], env.Msg)
	}
	// Group default's fencing counter well above g1's.
	for i := range 20 {
		code, env, _ := post(t, lockURL(dOld), keyA, fmt.Sprintf(`{"key":"warm:%d","ttl":2}`, i))
		require.Equal(t, http.StatusOK, code, env.Msg)
	}

	// Old and moving run together: they share group default.
	ok, tok, oldFence := acquire(dOld)
	require.True(t, ok, refusal)
	ok, _, _ = acquire(dMoving)
	require.False(t, ok, "the moving daemon sees the old daemon's lock")
	release(dOld, tok)

	ok, tok, movingFence := acquire(dMoving)
	require.True(t, ok, "the key is free once the old daemon's release answered: %s", refusal)
	require.Greater(t, movingFence, oldFence)
	for i, addr := range append(append([]string{}, ch.a...), ch.b...) {
		r := redis.NewClient(&redis.Options{Addr: addr})
		v, err := r.Get(context.Background(), rk).Result()
		r.Close()
		if err == nil {
			require.Equal(t, tok, v, "master %d holds the moving lock's one token", i)
		}
	}
	ok, _, _ = acquire(dOld)
	require.False(t, ok, "the old daemon sees the moving lock (group default)")
	// A daemon on the new groups while the old one may still lock (step 2
	// skipped) is refused, not a second holder: the layout gate.
	dNew := ch.onNew(t)
	code, env, _ := post(t, lockURL(dNew), keyA, fmt.Sprintf(`{"key":%q,"ttl":2}`, key))
	require.Equal(t, http.StatusServiceUnavailable, code, "%v %s", env.Data, env.Msg)
	require.Contains(t, env.Msg, "placement: daemons on other master groups registered until")
	release(dMoving, tok)

	// groups-change follows the steps.
	report := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		require.NoError(t, run(context.Background(), append([]string{"groups-change"}, args...), &out, &errOut), errOut.String())
		return out.String()
	}
	out := report("--daemons", dOld+","+dMoving)
	require.Contains(t, out, "step 1: 1 of 2 daemons lock moved keys in both groups")
	require.Contains(t, out, dMoving+": moving from [default] to [default g1]")
	// Step 2 counts from the old daemon's end (the placement registry):
	// it must stop first, as in the procedure.
	require.NoError(t, stopOld())
	out = report("--daemons", dMoving, "--wait", "--interval", "200ms")
	require.Contains(t, out, "step 2 done")
	t.Log(out)

	// Moving and new run together: they share group g1.
	ok, tok, _ = acquire(dMoving)
	require.True(t, ok, refusal)
	ok, _, _ = acquire(dNew)
	require.False(t, ok, "the new daemon sees the moving lock (group g1)")
	release(dMoving, tok)
	ok, tok, newFence := acquire(dNew)
	require.True(t, ok, "the key is free once the moving daemon's release answered: %s", refusal)
	require.Greater(t, newFence, movingFence, "g1's fence starts above every fence the key had")
	ok, _, _ = acquire(dMoving)
	require.False(t, ok, "the moving daemon sees the new daemon's lock")
	release(dNew, tok)
	out = report("--daemons", dMoving+","+dNew)
	require.Contains(t, out, "step 3: 1 of 2 daemons on the new groups only")
	out = report("--daemons", dNew, "--to", "default,g1")
	require.Contains(t, out, "step 3 done")
	var errOut bytes.Buffer
	require.ErrorContains(t, run(context.Background(), []string{"groups-change", "--daemons", ""}, &bytes.Buffer{}, &errOut), "--daemons: at least one daemon URL")
}

// TestMovingDaemonWaits: wait_ms waits on a daemon in the moving phase —
// for a moved key held by a daemon already on the new groups (in the new
// group only), and for a semaphore's permit — instead of answering
// acquired:false at once. Found by a helper: both answered in 30-50 ms
// with wait_ms 8000.
func TestMovingDaemonWaits(t *testing.T) {
	ch := newGroupChange(t, "chw", 10)
	key := ch.movedKey(t)
	dMoving, dNew := ch.moving(t), ch.onNew(t)
	code, env, _ := post(t, lockURL(dNew), keyA, fmt.Sprintf(`{"key":%q,"ttl":1}`, key))
	require.Equal(t, http.StatusOK, code, env.Msg)
	require.Equal(t, true, env.Data["acquired"], env.Msg)
	start := time.Now()
	code, env, _ = post(t, lockURL(dMoving), keyA, fmt.Sprintf(`{"key":%q,"ttl":2,"wait_ms":5000}`, key))
	require.Equal(t, http.StatusOK, code, env.Msg)
	require.Equal(t, true, env.Data["acquired"], "granted once the new-groups lock ended: %s %v", env.Msg, env.Data)
	require.Greater(t, time.Since(start), 500*time.Millisecond, "it waited for the holder")

	code, env, _ = post(t, lockURL(dMoving), keyA, `{"key":"sem","permits":1,"ttl":1}`)
	require.Equal(t, http.StatusOK, code, env.Msg)
	require.Equal(t, true, env.Data["acquired"], env.Msg)
	start = time.Now()
	code, env, _ = post(t, lockURL(dMoving), keyA, `{"key":"sem","permits":1,"ttl":2,"wait_ms":5000}`)
	require.Equal(t, http.StatusOK, code, env.Msg)
	require.Equal(t, true, env.Data["acquired"], "a permit once the first expired: %s %v", env.Msg, env.Data)
	require.Greater(t, time.Since(start), 500*time.Millisecond, "it waited for the permit")
}

// TestStepTwoWaitsForTheOldDaemons: a rolling update starts the moving
// daemon first, and the old daemon serves on: it takes a moved key well
// after the moving daemon started (past the moving daemon's start plus max
// TTL, where groups-change used to end step 2), then stops. groups-change
// must not say "step 2 done" until max TTL after the old daemon's last
// possible grant, which the moving daemon reads from the placement
// registry (old_until_ms in /readyz); by then the old lock has ended.
// Found by a black-box pass: "step 2 done" a second after the old daemon
// stopped, and a daemon on the new groups granted the key again.
func TestStepTwoWaitsForTheOldDaemons(t *testing.T) {
	const maxTTL = 3
	ch := newGroupChange(t, "chr", maxTTL)
	key := ch.movedKey(t)
	dMoving := ch.moving(t)
	movingSince := time.Now()
	dOld, stopOld := startDaemon(t, ch.common, func(c *config.Config) { c.Masters = ch.a })
	time.Sleep(time.Until(movingSince.Add(maxTTL*time.Second + 500*time.Millisecond)))
	code, env, _ := post(t, lockURL(dOld), keyA, fmt.Sprintf(`{"key":%q,"ttl":%d}`, key, maxTTL))
	require.Equal(t, http.StatusOK, code, env.Msg)
	require.Equal(t, true, env.Data["acquired"], env.Msg)
	require.NoError(t, stopOld())
	stopped := time.Now()

	readOld := func() int64 {
		d, err := readPlacement(context.Background(), http.DefaultClient, dMoving)
		require.NoError(t, err)
		require.NotNil(t, d.Placement.OldUntilMS, "a moving daemon reports old_until_ms")
		return *d.Placement.OldUntilMS
	}
	require.Eventually(t, func() bool { return readOld() >= stopped.UnixMilli() }, 5*time.Second, 50*time.Millisecond,
		"the registry says the old daemon may have locked until after it stopped")
	// The rule before the registry, from the moving daemon's start alone,
	// would say step 2 is done now: that is the bug this test holds off.
	require.True(t, time.Now().After(movingSince.Add(maxTTL*time.Second)))
	var out, errOut bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"groups-change", "--daemons", dMoving}, &out, &errOut), errOut.String())
	assert.Contains(t, out.String(), "step 2: every daemon is moving; waiting")
	assert.NotContains(t, out.String(), "step 2 done")
	// A daemon started on the new groups now, and listed alone, is step 3
	// before step 2's end: its registry reading says so, not "step 3 done"
	// (a black-box pass got "the change is complete" here).
	dNew := ch.onNew(t)
	require.Eventually(t, func() bool {
		d, err := readPlacement(context.Background(), http.DefaultClient, dNew)
		return err == nil && d.Placement.OthersUntilMS != nil && *d.Placement.OthersUntilMS >= stopped.UnixMilli()
	}, 5*time.Second, 50*time.Millisecond, "the new daemon reads the old daemon's registration")
	out.Reset()
	err := run(context.Background(), []string{"groups-change", "--daemons", dNew, "--to", "default,g1"}, &out, &errOut)
	require.ErrorContains(t, err, "step 3 started before step 2's wait ended", out.String())
	assert.NotContains(t, out.String(), "step 3 done")

	out.Reset()
	require.NoError(t, run(context.Background(), []string{"groups-change", "--daemons", dMoving, "--wait", "--interval", "100ms"}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), "step 2 done")
	assert.False(t, time.Now().Before(stopped.Add(maxTTL*time.Second)), "step 2 ended max TTL after the old daemon's end, or later")
	for i, addr := range ch.a {
		r := redis.NewClient(&redis.Options{Addr: addr})
		n, err := r.Exists(context.Background(), lockRedisKey(ch.prefix, "acme", key)).Result()
		r.Close()
		require.NoError(t, err)
		assert.Zero(t, n, "master %d: the old daemon's lock has ended when step 2 is done", i)
	}
}

// TestAStaleDaemonGrantsNothing: a daemon still on the old groups that
// comes back after the change ended (a black-box pass paused one with
// SIGSTOP through the change and resumed it; here one is started on the
// old list, which the layout gate treats alike: it has no permit) must not
// grant a moved key that a daemon on the new groups holds. It did, to two
// holders with one fence, though the registry showed both daemons each
// other (daemon/placements.go, "The layout gate"). The daemon on the new
// groups keeps granting: the stale one never registers.
func TestAStaleDaemonGrantsNothing(t *testing.T) {
	const maxTTL = 3
	ch := newGroupChange(t, "chs", maxTTL)
	key := ch.movedKey(t)
	dNew := ch.onNew(t)
	code, env, _ := post(t, lockURL(dNew), keyA, fmt.Sprintf(`{"key":%q,"ttl":%d}`, key, maxTTL))
	require.Equal(t, http.StatusOK, code, env.Msg)
	require.Equal(t, true, env.Data["acquired"], env.Msg)

	dOld := daemonURL(t, ch.common, func(c *config.Config) { c.Masters = ch.a })
	code, env, hdr := post(t, lockURL(dOld), keyA, fmt.Sprintf(`{"key":%q,"ttl":%d}`, key, maxTTL))
	assert.Equal(t, http.StatusServiceUnavailable, code, "a daemon on the old groups grants nothing while the new groups' daemons may hold locks: %v %s", env.Data, env.Msg)
	assert.NotEqual(t, true, env.Data["acquired"], env.Msg)
	assert.Contains(t, env.Msg, "daemons on other master groups registered until")
	// Retry when the new daemons' registration (2 s at the least, renewed)
	// and the max TTL after it could have ended: 4 to 5 s from now.
	retry, err := strconv.Atoi(hdr.Get("Retry-After"))
	require.NoError(t, err, hdr)
	assert.True(t, retry >= 4 && retry <= 5, "Retry-After %d", retry)

	// A few registry rounds later (the stale daemon tried and did not
	// register), the new groups' daemon still grants: a key that did not
	// move, and the moved key once released.
	time.Sleep(1500 * time.Millisecond)
	code, env, _ = post(t, lockURL(dNew), keyA, `{"key":"stays","ttl":3}`)
	require.Equal(t, http.StatusOK, code, env.Msg)
	assert.Equal(t, true, env.Data["acquired"], env.Msg)
	code, env, _ = post(t, lockURL(dOld), keyA, `{"key":"stays-old","ttl":3}`)
	assert.Equal(t, http.StatusServiceUnavailable, code, "the stale daemon stays shut: %s", env.Msg)
}

// TestOneGroupUnderTwoNamesIsOneLayout: a masters list (the group
// "default") and a master_groups of one group by another name over the
// same masters place every key on them alike, so the layout gate lets
// them serve side by side (the chart renders one group under its name
// where an earlier version wrote a masters list: a rolling upgrade runs
// both).
func TestOneGroupUnderTwoNamesIsOneLayout(t *testing.T) {
	ch := newGroupChange(t, "cho", 3)
	dList := daemonURL(t, ch.common, func(c *config.Config) { c.Masters = ch.a })
	dNamed := daemonURL(t, ch.common, func(c *config.Config) {
		c.Masters, c.MasterGroups = nil, []config.MasterGroup{{Name: "g0", Masters: ch.a}}
	})
	for range 3 { // across registry rounds, each daemon's registration read by the other
		for _, d := range []string{dList, dNamed} {
			code, env, _ := post(t, lockURL(d), keyA, `{"key":"k","ttl":3}`)
			require.Equal(t, http.StatusOK, code, env.Msg)
			require.Equal(t, true, env.Data["acquired"], env.Msg)
			code, env, _ = post(t, lockURL(d), keyA, fmt.Sprintf(`{"key":"k","action":"release","token":%q}`, env.Data["token"]))
			require.Equal(t, http.StatusOK, code, env.Msg)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestAPausedOldDaemonGrantsNothingWhenItResumes is the black-box pass's
// case itself, with the real binary: a daemon on the old groups stopped
// (SIGSTOP) for longer than its registration lives plus the max TTL, a
// daemon on the new groups that takes a moved key meanwhile, and the old
// one resumed (SIGCONT) and asked for the same key at once. Without the
// layout gate it granted it on the old group, a second holder with a
// fence of that group (3 runs of 3); its permit ran out in the pause, and
// the round it asks for before it grants reads the new groups'
// registration.
func TestAPausedOldDaemonGrantsNothingWhenItResumes(t *testing.T) {
	const maxTTL = 2
	ch := newGroupChange(t, "chp", maxTTL)
	key := ch.movedKey(t)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	var y strings.Builder
	fmt.Fprintf(&y, "listen: %q\nkey_prefix: %q\nmax_ttl: %d\ndefault_ttl: %d\nhealth_interval: 50ms\nper_master_timeout: 500ms\ndrain_delay: 0s\nmasters:\n", addr, ch.prefix, maxTTL, maxTTL)
	for _, m := range ch.a {
		fmt.Fprintf(&y, "  - %q\n", m)
	}
	fmt.Fprintf(&y, "api_keys:\n  - name: acme\n    key: %q\n", keyA)
	file := t.TempDir() + "/old.yaml"
	require.NoError(t, os.WriteFile(file, []byte(y.String()), 0o600))
	old := exec.Command(binary, "serve", "--config", file)
	var logs bytes.Buffer
	old.Stdout, old.Stderr = &logs, &logs
	require.NoError(t, old.Start())
	t.Cleanup(func() {
		_ = old.Process.Signal(syscall.SIGCONT)
		_ = old.Process.Kill()
		_ = old.Wait()
	})
	dOld := "http://" + addr
	require.Eventually(t, func() bool {
		resp, err := httpClient.Get(dOld + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 15*time.Second, 50*time.Millisecond, "the old daemon is ready: %s", &logs)
	code, env, _ := post(t, lockURL(dOld), keyA, `{"key":"warm","ttl":2}`)
	require.Equal(t, http.StatusOK, code, env.Msg)
	require.Equal(t, true, env.Data["acquired"], env.Msg)

	require.NoError(t, old.Process.Signal(syscall.SIGSTOP))
	// Its registration (2 s at the least) and the max TTL run out: a
	// daemon on the new groups may start and grant.
	time.Sleep(2*time.Second + maxTTL*time.Second + 500*time.Millisecond)
	dNew := ch.onNew(t)
	code, env, _ = post(t, lockURL(dNew), keyA, fmt.Sprintf(`{"key":%q,"ttl":%d}`, key, maxTTL))
	require.Equal(t, http.StatusOK, code, env.Msg)
	require.Equal(t, true, env.Data["acquired"], "the daemon on the new groups grants once the old one's registration and max TTL are over: %s", env.Msg)
	token := env.Data["token"].(string)

	require.NoError(t, old.Process.Signal(syscall.SIGCONT))
	// Its masters count again within a few probes (their clocks are read
	// anew after the pause); the new daemon's lock lasts 2 s, renewed.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		code, env, _ = post(t, lockURL(dOld), keyA, fmt.Sprintf(`{"key":%q,"ttl":%d}`, key, maxTTL))
		require.NotEqual(t, true, env.Data["acquired"], "the resumed old daemon granted the moved key a daemon on the new groups holds: %v", env.Data)
		c, e, _ := post(t, lockURL(dNew), keyA, fmt.Sprintf(`{"key":%q,"action":"extend","token":%q,"ttl":%d}`, key, token, maxTTL))
		require.Equal(t, http.StatusOK, c, e.Msg)
	}
	assert.Equal(t, http.StatusServiceUnavailable, code, env.Msg)
	assert.Contains(t, env.Msg, "daemons on other master groups registered until")
}

// TestStepTwoWaitsForADrainingOldDaemon: an old daemon told to stop
// (SIGTERM) serves on for its drain_delay, longer than a registration
// lasts (2 s here), and grants a moved key late in the drain. Its
// registrations must go on until it stops serving, so that step 2 ends max
// TTL after that grant at the earliest (a black-box pass with a 25 s drain:
// the registry ended 10 s into it, "step 2 done" came while the draining
// daemons' locks stood, and a key was granted twice).
func TestStepTwoWaitsForADrainingOldDaemon(t *testing.T) {
	const maxTTL, drain = 3, 4 * time.Second
	ch := newGroupChange(t, "chd", maxTTL)
	key := ch.movedKey(t)
	dMoving := ch.moving(t)
	dOld, stopOld := startDaemon(t, ch.common, func(c *config.Config) {
		c.Masters = ch.a
		c.DrainDelay = config.Duration(drain)
	})
	stopped := make(chan error, 1)
	go func() { stopped <- stopOld() }() // SIGTERM: the drain starts
	time.Sleep(drain - 500*time.Millisecond)
	code, env, _ := post(t, lockURL(dOld), keyA, fmt.Sprintf(`{"key":%q,"ttl":%d}`, key, maxTTL))
	require.Equal(t, http.StatusOK, code, env.Msg)
	require.Equal(t, true, env.Data["acquired"], "the draining daemon still serves: %s", env.Msg)
	granted := time.Now()
	require.NoError(t, <-stopped)

	d, err := readPlacement(context.Background(), http.DefaultClient, dMoving)
	require.NoError(t, err)
	require.NotNil(t, d.Placement.OldUntilMS)
	assert.GreaterOrEqual(t, *d.Placement.OldUntilMS, granted.UnixMilli(), "the registry covers the drain's last grant")
	var out, errOut bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"groups-change", "--daemons", dMoving, "--wait", "--interval", "100ms"}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), "step 2 done")
	assert.False(t, time.Now().Before(granted.Add(maxTTL*time.Second)), "step 2 ended max TTL after the drain's last grant, or later")
}

// TestServeRefusesAMasterInTwoGroups: one Redis server listed in two
// groups under two spellings (127.0.0.1 and localhost), which config's
// address check cannot see: the daemon refuses to start, naming both
// places and the run_id, and writes nothing on the masters. Found by a
// helper: it started and served.
func TestServeRefusesAMasterInTwoGroups(t *testing.T) {
	srvs, err := redisproc.StartN(5, redisproc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = redisproc.StopAll(srvs) })
	_, port, err := net.SplitHostPort(srvs[0].Addr())
	require.NoError(t, err)
	cfg := fmt.Sprintf(`api_keys:
  - {name: acme, key: %q}
master_groups:
  - {name: g0, masters: [%q, %q, %q]}
  - {name: g1, masters: ["localhost:%s", %q, %q]}
`, keyA, srvs[0].Addr(), srvs[1].Addr(), srvs[2].Addr(), port, srvs[3].Addr(), srvs[4].Addr())
	path := filepath.Join(t.TempDir(), "redlockd.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "serve", "--config", path, "--listen", "127.0.0.1:0").CombinedOutput()
	require.Error(t, err, "started with one server in two groups: %s", out)
	require.NoError(t, ctx.Err(), "%s", out)
	assert.Contains(t, string(out), "two masters are the same server: group g0's masters[0] ("+srvs[0].Addr()+") and group g1's masters[0] (localhost:"+port+") have run_id")
	// Refused before any Client wrote to the masters: a refused daemon's
	// max TTL registration (24 h by default) bounded every later loss
	// quarantine on them for a day (a black-box pass).
	for i, s := range srvs {
		r := redis.NewClient(&redis.Options{Addr: s.Addr()})
		keys, err := r.Keys(ctx, "*").Result()
		r.Close()
		require.NoError(t, err)
		assert.Empty(t, keys, "master %d", i)
	}
}

// groupChange is the default group (three real masters) gaining g1 (three
// more), with daemons of each phase to start over them.
type groupChange struct {
	a, b   []string
	prefix string
	common func(*config.Config)
	groups []config.MasterGroup
}

func newGroupChange(t *testing.T, prefixWord string, maxTTL int) *groupChange {
	t.Helper()
	srvs, err := redisproc.StartN(6, redisproc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = redisproc.StopAll(srvs) })
	ch := &groupChange{
		a:      []string{srvs[0].Addr(), srvs[1].Addr(), srvs[2].Addr()},
		b:      []string{srvs[3].Addr(), srvs[4].Addr(), srvs[5].Addr()},
		prefix: fmt.Sprintf("%s%d:", prefixWord, prefixSeq.Add(1)),
	}
	ch.common = func(c *config.Config) { c.KeyPrefix, c.MaxTTL, c.DefaultTTL = ch.prefix, maxTTL, 2 }
	ch.groups = []config.MasterGroup{{Name: "default", Masters: ch.a}, {Name: "g1", Masters: ch.b}}
	return ch
}

// moving starts a daemon in the moving phase; onNew one on the new groups.
func (ch *groupChange) moving(t *testing.T) string {
	return daemonURL(t, ch.common, func(c *config.Config) {
		c.Masters, c.MasterGroups = nil, ch.groups
		c.PreviousMasterGroups = []config.MasterGroup{{Name: "default", Masters: ch.a}}
	})
}

func (ch *groupChange) onNew(t *testing.T) string {
	return daemonURL(t, ch.common, func(c *config.Config) { c.Masters, c.MasterGroups = nil, ch.groups })
}

// movedKey is an account acme key that moves from default to g1.
func (ch *groupChange) movedKey(t *testing.T) string {
	place, err := redlock.NewPlacement("default", "g1")
	require.NoError(t, err)
	for i := 0; ; i++ {
		if k := fmt.Sprintf("moved:%d", i); place.Group(lockRedisKey(ch.prefix, "acme", k)) == 1 {
			return k
		}
	}
}

// TestAnOldDaemonOpeningAfterAChangeFencesAbove: a daemon on the new
// groups grants a moved key from its new group (g1) and stops; g1's
// counter then stands above the old group's by grants the new daemons
// made after their last fence sync (set here on g1's masters: 1000 more).
// A daemon on the old groups that opens after them (its layout gate lets
// it grant once their registration and the max TTL are over) must give
// the key a fence above every fence g1 issued, though it never reads g1.
// A black-box pass paused such a daemon through a change and resumed it:
// it gave moved keys fences already issued (1410, 1411) or lower (1412
// then 1410), 3 runs of 3. Without daemon.JumpFences it gives the old
// group's counter + 1 here.
func TestAnOldDaemonOpeningAfterAChangeFencesAbove(t *testing.T) {
	const maxTTL = 2
	ch := newGroupChange(t, "chf", maxTTL)
	key := ch.movedKey(t)
	ctx := context.Background()
	dNew, stopNew := startDaemon(t, ch.common, func(c *config.Config) { c.Masters, c.MasterGroups = nil, ch.groups })
	code, env, _ := post(t, lockURL(dNew), keyA, fmt.Sprintf(`{"key":%q,"ttl":%d}`, key, maxTTL))
	require.Equal(t, http.StatusOK, code, env.Msg)
	require.Equal(t, true, env.Data["acquired"], env.Msg)
	newFence := int64(env.Data["fence"].(float64))
	code, env, _ = post(t, lockURL(dNew), keyA, fmt.Sprintf(`{"key":%q,"action":"release","token":%q}`, key, env.Data["token"]))
	require.Equal(t, http.StatusOK, code, env.Msg)
	require.NoError(t, stopNew())

	counter := ch.prefix + "fence"
	var oldHighest int64
	for _, addr := range ch.a {
		r := redis.NewClient(&redis.Options{Addr: addr})
		v, _ := r.Get(ctx, counter).Int64()
		r.Close()
		oldHighest = max(oldHighest, v)
	}
	issued := max(oldHighest, newFence) + 1000 // g1's grants after the last sync
	for _, addr := range ch.b {
		r := redis.NewClient(&redis.Options{Addr: addr})
		require.NoError(t, r.Set(ctx, counter, issued, 0).Err())
		r.Close()
	}

	dOld := daemonURL(t, ch.common, func(c *config.Config) { c.Masters = ch.a })
	var fence int64
	require.Eventually(t, func() bool {
		code, env, _ := post(t, lockURL(dOld), keyA, fmt.Sprintf(`{"key":%q,"ttl":%d}`, key, maxTTL))
		if code != http.StatusOK || env.Data["acquired"] != true {
			return false
		}
		fence = int64(env.Data["fence"].(float64))
		return true
	}, 20*time.Second, 100*time.Millisecond, "the old daemon grants once the new one's registration and the max TTL are over")
	assert.Greater(t, fence, issued, "the moved key's fence from the old group is above every fence its new group issued")
}

// TestAMovingDaemonOutlivingItsChangeGrantsNothing: a daemon moving
// default > default,g1 that outlives its change (here started with the
// step-1 config after a second change went to default,g2; a black-box
// pass paused one through it and resumed it) shares no groups with the
// daemons on default,g2: a key they place in g2 it locks in default only.
// Ungated, it granted such a key that a daemon on default,g2 held (a
// second holder; the pass: 20–42 keys, fences going back, 4 runs of 4).
// The layout gate holds it off as a stale stable daemon is held off, and
// the other way round a daemon on default,g2 is held off while the moving
// one may hold locks. A daemon moving default > default,g2 shares default
// with it and locks beside it.
func TestAMovingDaemonOutlivingItsChangeGrantsNothing(t *testing.T) {
	const maxTTL = 3
	srvs, err := redisproc.StartN(9, redisproc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = redisproc.StopAll(srvs) })
	addrs := func(s []*redisproc.Server) []string {
		var out []string
		for _, x := range s {
			out = append(out, x.Addr())
		}
		return out
	}
	g := func(name string, s []*redisproc.Server) config.MasterGroup {
		return config.MasterGroup{Name: name, Masters: addrs(s)}
	}
	def, g1, g2 := g("default", srvs[:3]), g("g1", srvs[3:6]), g("g2", srvs[6:])
	common := func(prefix string) func(*config.Config) {
		return func(c *config.Config) { c.KeyPrefix, c.MaxTTL, c.DefaultTTL, c.Masters = prefix, maxTTL, 2, nil }
	}
	onGroups := func(prefix string, previous []config.MasterGroup, groups ...config.MasterGroup) string {
		return daemonURL(t, common(prefix), func(c *config.Config) { c.MasterGroups, c.PreviousMasterGroups = groups, previous })
	}
	// key: an acme key that default,g2 places in g2 and default,g1 in
	// default: the moving daemon locks it in default only.
	key := func(prefix string) string {
		p2, err := redlock.NewPlacement("default", "g2")
		require.NoError(t, err)
		p1, err := redlock.NewPlacement("default", "g1")
		require.NoError(t, err)
		for i := 0; ; i++ {
			k := fmt.Sprintf("k%d", i)
			if rk := lockRedisKey(prefix, "acme", k); p2.Group(rk) == 1 && p1.Group(rk) == 0 {
				return k
			}
		}
	}
	acquire := func(base, k string) (int, envelope, http.Header) {
		t.Helper()
		return post(t, lockURL(base), keyA, fmt.Sprintf(`{"key":%q,"ttl":%d}`, k, maxTTL))
	}
	moving := []config.MasterGroup{def}

	t.Run("started after a later change", func(t *testing.T) {
		prefix := fmt.Sprintf("chm%d:", prefixSeq.Add(1))
		k := key(prefix)
		dLater, stopLater := startDaemon(t, common(prefix), func(c *config.Config) { c.MasterGroups = []config.MasterGroup{def, g2} })
		code, env, _ := acquire(dLater, k)
		require.Equal(t, http.StatusOK, code, env.Msg)
		require.Equal(t, true, env.Data["acquired"], env.Msg)
		laterFence := int64(env.Data["fence"].(float64))

		dMoving := onGroups(prefix, moving, def, g1)
		code, env, hdr := acquire(dMoving, k)
		assert.Equal(t, http.StatusServiceUnavailable, code, "a daemon moving default > default,g1 grants nothing while daemons on default,g2 may hold locks: %v %s", env.Data, env.Msg)
		assert.NotEqual(t, true, env.Data["acquired"], "a second holder of %s", k)
		assert.Contains(t, env.Msg, "daemons on other master groups registered until")
		assert.NotEmpty(t, hdr.Get("Retry-After"))
		// A few registry rounds later (the moving daemon never
		// registered), the later daemon still grants.
		time.Sleep(1500 * time.Millisecond)
		code, env, _ = acquire(dLater, "stays")
		require.Equal(t, http.StatusOK, code, env.Msg)
		assert.Equal(t, true, env.Data["acquired"], env.Msg)
		code, env, _ = acquire(dMoving, "stays-moving")
		assert.Equal(t, http.StatusServiceUnavailable, code, "the moving daemon stays shut: %s", env.Msg)

		// Once the later daemon stopped and its registration and the max
		// TTL ran out, the moving daemon grants the key, with a fence above
		// every fence g2 issued (daemon.JumpFences; it never reads g2).
		// g2's counter stands above default's by the grants the later
		// daemons made after their last fence sync (set here: 1000 more).
		require.NoError(t, stopLater())
		ctx := context.Background()
		counter := prefix + "fence"
		issued := laterFence
		for _, addr := range def.Masters {
			r := redis.NewClient(&redis.Options{Addr: addr})
			v, _ := r.Get(ctx, counter).Int64()
			r.Close()
			issued = max(issued, v)
		}
		issued += 1000
		for _, addr := range g2.Masters {
			r := redis.NewClient(&redis.Options{Addr: addr})
			require.NoError(t, r.Set(ctx, counter, issued, 0).Err())
			r.Close()
		}
		var fence int64
		require.Eventually(t, func() bool {
			code, env, _ := acquire(dMoving, k)
			if code != http.StatusOK || env.Data["acquired"] != true {
				return false
			}
			fence = int64(env.Data["fence"].(float64))
			return true
		}, 20*time.Second, 100*time.Millisecond, "the moving daemon grants once the later daemon's registration and the max TTL are over")
		assert.Greater(t, fence, issued, "the key's fence goes on above every fence the later layout issued")
	})

	t.Run("a later change while it runs", func(t *testing.T) {
		prefix := fmt.Sprintf("chm%d:", prefixSeq.Add(1))
		k := key(prefix)
		dMoving := onGroups(prefix, moving, def, g1)
		code, env, _ := acquire(dMoving, k)
		require.Equal(t, http.StatusOK, code, env.Msg)
		require.Equal(t, true, env.Data["acquired"], env.Msg)
		// Moving from default too: both lock every key in default.
		dOtherMove := onGroups(prefix, moving, def, g2)
		code, env, _ = acquire(dOtherMove, "beside")
		require.Equal(t, http.StatusOK, code, env.Msg)
		require.Equal(t, true, env.Data["acquired"], "a daemon moving default > default,g2 shares default with it: %s", env.Msg)
		code, env, _ = acquire(dOtherMove, k)
		require.Equal(t, http.StatusOK, code, env.Msg)
		require.NotEqual(t, true, env.Data["acquired"], "it sees the first moving daemon's lock in default")

		dLater := onGroups(prefix, nil, def, g2)
		code, env, _ = acquire(dLater, k)
		assert.Equal(t, http.StatusServiceUnavailable, code, "a daemon on default,g2 grants nothing while the daemon moving to default,g1 may hold locks: %v %s", env.Data, env.Msg)
		assert.NotEqual(t, true, env.Data["acquired"], "a second holder of %s", k)
		// The moving daemon keeps granting beside the compatible one.
		code, env, _ = acquire(dMoving, "stays")
		require.Equal(t, http.StatusOK, code, env.Msg)
		assert.Equal(t, true, env.Data["acquired"], env.Msg)
	})
}

// TestALongerMaxTTLOnOneLayoutHoldsOffNoOther: the layout gate holds a
// daemon off another layout's locks for that layout's daemons' own max TTL
// after their registration ended, not for the longest max TTL any client
// registered on the masters. A black-box pass stopped a daemon on [g0]
// (max_ttl 15), let daemons on [g0, g1] open after its 15 s, then started
// one more replica on [g0, g1] with the default max_ttl (a day): every
// daemon on [g0, g1], the running ones too, answered 503 "a lock they
// granted may stand until" a day later, blaming the stopped [g0] daemon,
// and stayed shut after the replica stopped. A registration that records no
// max TTL (a daemon of the version before) is still held to the longest
// one registered, and a daemon that registers over such a registration of
// its own layout keeps it as a bound first.
func TestALongerMaxTTLOnOneLayoutHoldsOffNoOther(t *testing.T) {
	const maxTTL = 2
	ch := newGroupChange(t, "chl", maxTTL)
	old, stop := startDaemon(t, ch.common, func(c *config.Config) { c.Masters = ch.a })
	code, env, _ := post(t, lockURL(old), keyA, `{"key":"k","ttl":1}`)
	require.Equal(t, http.StatusOK, code, env.Msg)
	require.NoError(t, stop())

	dNew := ch.onNew(t)
	grants := func(d string) (bool, string) {
		code, env, _ := post(t, lockURL(d), keyA, fmt.Sprintf(`{"key":"k-%d","ttl":1}`, time.Now().UnixNano()))
		return code == http.StatusOK && env.Data["acquired"] == true, env.Msg
	}
	var last string
	require.Eventually(t, func() bool { ok, msg := grants(dNew); last = msg; return ok }, 20*time.Second, 100*time.Millisecond,
		"the daemon on [default, g1] opens once the old daemon's registration and its max TTL ended: %s", func() string { return last })

	// One more replica on [default, g1] with a day's max TTL: across
	// registry rounds (each now reads a day registered on the masters)
	// both daemons on the layout keep granting.
	dLong := daemonURL(t, ch.common, func(c *config.Config) { c.Masters, c.MasterGroups, c.MaxTTL = nil, ch.groups, 86400 })
	for range 15 {
		for _, d := range []string{dNew, dLong} {
			ok, msg := grants(d)
			require.True(t, ok, "a daemon on [default, g1]: %s", msg)
		}
		time.Sleep(100 * time.Millisecond)
	}

	ctx := context.Background()
	key := ch.prefix + "placements"
	own := "stable default,g1"
	for _, a := range ch.a {
		r := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { _ = r.Close() })
		members, err := r.ZRange(ctx, key, 0, -1).Result()
		require.NoError(t, err)
		assert.Contains(t, members, "admitted max_ttl 2000 of stable default", "the old daemon's registrations record its max TTL (%s)", a)
		assert.Contains(t, members, "admitted max_ttl 86400000 of "+own, a)
		// A registration of the layout by a daemon that records no max
		// TTL, a minute ahead, above every bound of it: the next daemon
		// to register the layout keeps it as a bound of the longest max
		// TTL registered (a day) before raising the layout's score.
		require.NoError(t, r.ZAdd(ctx, key, redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: own}).Err())
	}
	require.Eventually(t, func() bool {
		for _, a := range ch.a {
			r := redis.NewClient(&redis.Options{Addr: a})
			_, err := r.ZScore(ctx, key, "admitted max_ttl 86400000 of "+own).Result()
			sc, err2 := r.ZScore(ctx, key, own).Result()
			kept, err3 := r.ZScore(ctx, key, "admitted max_ttl 86400000 of "+own).Result()
			_ = r.Close()
			if err != nil || err2 != nil || err3 != nil || kept < sc {
				return false
			}
		}
		return true
	}, 5*time.Second, 50*time.Millisecond, "the earlier registration kept as a bound")

	// Control: a registration of [default] that records no max TTL (a
	// daemon of the version before) holds the daemons on [default, g1]
	// off for the longest max TTL registered: a day.
	for _, a := range ch.a {
		r := redis.NewClient(&redis.Options{Addr: a})
		require.NoError(t, r.ZAdd(ctx, key, redis.Z{Score: float64(time.Now().Add(500 * time.Millisecond).UnixMilli()), Member: "stable default"}).Err())
		_ = r.Close()
	}
	require.Eventually(t, func() bool { ok, msg := grants(dNew); last = msg; return !ok }, 5*time.Second, 50*time.Millisecond, "held off by a registration with no recorded max TTL")
	_, after, found := strings.Cut(last, "a lock they granted may stand until ")
	require.True(t, found, last)
	until, err := time.Parse(time.RFC3339Nano, strings.Fields(after)[0])
	require.NoError(t, err, last)
	assert.Greater(t, time.Until(until), 23*time.Hour, "the longest max TTL registered, a day: %s", last)
}
