package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/config"
	"github.com/redlockd/redlockd/internal/redisproc"
	"github.com/redlockd/redlockd/redlock"
)

// httpHold is one lock as its HTTP caller saw it: from the acquire's
// answer to the release's request (or the end of validity_ms, if earlier).
type httpHold struct {
	key        string
	fence      int64
	start, end time.Time
	via        string
}

// TestChangingMasterGroupsUnderLoad runs a change of master groups (one
// group grows to two) through the HTTP API with 64 concurrent callers and
// three daemons, one per phase, used as the change's steps allow: old and
// moving; then the old daemon stopped and moving alone until `redlockd
// groups-change --wait` says step 2 is done (the old daemon's last
// registration plus the max TTL); then moving and new. Every grant is
// checked against every other of its key: no two overlap, and in
// acquisition order the fences strictly increase; no call fails.
func TestChangingMasterGroupsUnderLoad(t *testing.T) {
	violations, grants, failed, last := changeUnderLoad(t, true, func(d changeDaemons, load func(time.Duration, ...string)) {
		load(1500*time.Millisecond, d.old, d.moving) // step 1
		require.NoError(t, d.stopOld())
		step2 := make(chan error, 1)
		go func() {
			var out, errOut bytes.Buffer
			step2 <- run(context.Background(), []string{"groups-change", "--daemons", d.moving, "--wait", "--interval", "100ms"}, &out, &errOut)
		}()
		for done := false; !done; {
			load(250*time.Millisecond, d.moving) // step 2: moving daemons only
			select {
			case err := <-step2:
				require.NoError(t, err)
				done = true
			default:
			}
		}
		load(1500*time.Millisecond, d.moving, d.nw) // step 3
	})
	require.Zero(t, failed, "failed calls, last: %v", last)
	require.Empty(t, violations)
	for _, n := range []string{"old", "moving", "new"} {
		require.Greater(t, grants[n], 10, "grants through the %s daemon", n)
	}
	t.Logf("grants checked: %v; 0 failed calls, 0 violations", grants)
}

// TestChangingMasterGroupsSkippedStepIsRefused: an old and a new daemon
// at once (step 2 skipped) granted moved keys twice, which the same check
// caught (the library's TestMovingCheckerSeesSkippedStep still shows the
// check catching it). The new daemon now grants nothing while the old one
// registers (the layout gate, daemon/placements.go): its calls fail with
// 503, and no key has two holders. Once the old daemon has stopped and its
// locks have ended, the new one grants, and a moved key's fence goes on
// above its old group's (a black-box pass saw 306 then 1 without the
// groups' fence sync, redlock.Groups.SyncFences).
func TestChangingMasterGroupsSkippedStepIsRefused(t *testing.T) {
	violations, grants, failed, last := changeUnderLoad(t, false, func(d changeDaemons, load func(time.Duration, ...string)) {
		load(1500*time.Millisecond, d.old, d.nw)
		require.NoError(t, d.stopOld())
		// The old daemon's registration (2 s at the least) and the max
		// TTL (2 s) after it: the new one grants again.
		time.Sleep(4500 * time.Millisecond)
		load(1500*time.Millisecond, d.nw)
	})
	require.Empty(t, violations)
	require.Greater(t, grants["old"], 10, "grants through the old daemon")
	require.Greater(t, grants["new"], 10, "grants through the new daemon once the old one's locks ended")
	require.Positive(t, failed)
	require.Contains(t, fmt.Sprint(last), "placement: daemons on other master groups registered until")
}

// changeDaemons are the daemons of changeUnderLoad, one per phase; stopOld
// stops the old one (as SIGTERM does).
type changeDaemons struct {
	old, moving, nw string
	stopOld         func() error
}

func changeUnderLoad(t *testing.T, withMoving bool, plan func(d changeDaemons, load func(time.Duration, ...string))) ([]string, map[string]int, int64, any) {
	srvs, err := redisproc.StartN(6, redisproc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = redisproc.StopAll(srvs) })
	a := []string{srvs[0].Addr(), srvs[1].Addr(), srvs[2].Addr()}
	b := []string{srvs[3].Addr(), srvs[4].Addr(), srvs[5].Addr()}
	prefix := fmt.Sprintf("chgl%d:", prefixSeq.Add(1))
	common := func(c *config.Config) { c.KeyPrefix, c.MaxTTL, c.DefaultTTL = prefix, 2, 1 }
	newGroups := []config.MasterGroup{{Name: "default", Masters: a}, {Name: "g1", Masters: b}}
	old, stopOld := startDaemon(t, common, func(c *config.Config) { c.Masters = a })
	// A moving daemon raises the new groups' counters above the old
	// one's (Moving.SyncFences): a test of the skipped step runs none.
	moving := ""
	if withMoving {
		moving = daemonURL(t, common, func(c *config.Config) {
			c.Masters, c.MasterGroups = nil, newGroups
			c.PreviousMasterGroups = []config.MasterGroup{{Name: "default", Masters: a}}
		})
	}
	nw := daemonURL(t, common, func(c *config.Config) { c.Masters, c.MasterGroups = nil, newGroups })
	names := map[string]string{old: "old", moving: "moving", nw: "new"}

	// Four keys that move to g1 and four that stay in default.
	place, err := redlock.NewPlacement("default", "g1")
	require.NoError(t, err)
	var keys []string
	moved, stay := 0, 0
	for i := 0; moved+stay < 8; i++ {
		k := fmt.Sprintf("k%d", i)
		switch g := place.Group(lockRedisKey(prefix, "acme", k)); {
		case g == 1 && moved < 4:
			moved++
			keys = append(keys, k)
		case g == 0 && stay < 4:
			stay++
			keys = append(keys, k)
		}
	}
	var mu sync.Mutex
	var holds []httpHold
	var errs atomic.Int64
	var lastErr atomic.Value
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	load := func(d time.Duration, daemons ...string) {
		stop := time.Now().Add(d)
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					base := daemons[rand.IntN(len(daemons))]
					key := keys[rand.IntN(len(keys))]
					env, err := tryPost(client, lockURL(base), keyA, fmt.Sprintf(`{"key":%q,"ttl":1}`, key))
					if err != nil || env.Ret != "ok" {
						errs.Add(1)
						lastErr.Store(fmt.Sprint(err, env.Msg))
						continue
					}
					if env.Data["acquired"] != true {
						continue
					}
					start := time.Now()
					valid := start.Add(time.Duration(env.Data["validity_ms"].(float64)) * time.Millisecond)
					// Held up to 9 ms: long enough that an old and a new
					// daemon granting one key at once overlap (the control),
					// short enough for many grants per key.
					time.Sleep(time.Duration(rand.IntN(10)) * time.Millisecond)
					end := time.Now()
					if valid.Before(end) {
						end = valid
					}
					if end.Before(valid) { // a lock that expired held is not released
						env, err := tryPost(client, lockURL(base), keyA, fmt.Sprintf(`{"key":%q,"action":"release","token":%q}`, key, env.Data["token"]))
						if err != nil || env.Ret != "ok" {
							errs.Add(1)
							lastErr.Store(fmt.Sprint(err, env.Msg))
						}
					}
					mu.Lock()
					holds = append(holds, httpHold{key: key, fence: int64(env.Data["fence"].(float64)), start: start, end: end, via: names[base]})
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	plan(changeDaemons{old: old, moving: moving, nw: nw, stopOld: stopOld}, load)

	byKey := map[string][]httpHold{}
	perDaemon := map[string]int{}
	for _, h := range holds {
		byKey[h.key] = append(byKey[h.key], h)
		perDaemon[h.via]++
	}
	var violations []string
	for key, hs := range byKey {
		slices.SortFunc(hs, func(x, y httpHold) int { return x.start.Compare(y.start) })
		last := 0 // the hold with the latest end so far: a hold may overlap one before its predecessor
		for i := 1; i < len(hs); i++ {
			p, c := hs[i-1], hs[i]
			if l := hs[last]; c.start.Before(l.end) {
				violations = append(violations, fmt.Sprintf("%s: two holders: %s (fence %d) until %v, %s (fence %d) from %v", key, l.via, l.fence, l.end, c.via, c.fence, c.start))
			}
			if hs[i].end.After(hs[last].end) {
				last = i
			}
			if c.fence <= p.fence {
				violations = append(violations, fmt.Sprintf("%s: fence went backwards: %s (%d) then %s (%d)", key, p.via, p.fence, c.via, c.fence))
			}
		}
	}
	return violations, perDaemon, errs.Load(), lastErr.Load()
}
