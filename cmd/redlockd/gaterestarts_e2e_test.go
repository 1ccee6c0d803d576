package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/config"
)

// TestRollingMasterRestartsKeepTheGateOpen: masters restarted empty one at
// a time, each repaired and counting again before the next goes, keep the
// daemon granting after the third, though the placement registry cannot
// wait out a registration's life + the max TTL (600 s here) for any of
// them: each is admitted (daemon/placements.go, admit) while the other
// four count and show no other layout. A black-box pass saw every acquire
// answered 503 "placement registry: no quorum … 3 not counted" after the
// third such restart within max_ttl, with /readyz showing five masters up;
// without admit this test's last acquire is refused the same way.
func TestRollingMasterRestartsKeepTheGateOpen(t *testing.T) {
	var cfg config.Config
	base, stop := startDaemon(t, func(c *config.Config) { c.MaxTTL = 600; cfg = *c })
	url := lockURL(base)
	// master is master i as /readyz shows it: its run_id and whether it
	// counts.
	master := func(i int) (runID string, counts bool) {
		resp, err := httpClient.Get(base + "/readyz")
		if err != nil {
			return "", false
		}
		defer resp.Body.Close()
		var body struct {
			Masters []struct {
				Index  int    `json:"index"`
				RunID  string `json:"run_id"`
				Counts bool   `json:"counts"`
			} `json:"masters"`
		}
		if json.NewDecoder(resp.Body).Decode(&body) != nil {
			return "", false
		}
		for _, m := range body.Masters {
			if m.Index == i {
				return m.RunID, m.Counts
			}
		}
		return "", false
	}
	cycle := func(n int) (int, envelope) {
		key := fmt.Sprintf("rolling-%d-%d", n, time.Now().UnixNano())
		code, env, _ := post(t, url, keyA, `{"key":"`+key+`","ttl":1}`)
		if code == http.StatusOK {
			_, _, _ = post(t, url, keyA, `{"action":"release","key":"`+key+`","token":"`+fmt.Sprint(env.Data["token"])+`"}`)
		}
		return code, env
	}
	code, env := cycle(0)
	require.Equal(t, http.StatusOK, code, env.Msg)
	for n, i := range []int{0, 1, 2} {
		before, _ := master(i)
		require.NoError(t, servers[i].Restart())
		// Counting again as the restarted server (its new run_id seen):
		// right after the restart /readyz may still show the last probe
		// of the old one, and a test that went on then restarted the
		// three masters at once (a majority lost its data: the gate then
		// rightly stays shut).
		require.Eventually(t, func() bool { id, counts := master(i); return id != before && id != "" && counts }, 20*time.Second, 50*time.Millisecond, "master %d repaired and counting", i)
		var last envelope
		if !assert.Eventually(t, func() bool {
			code, env := cycle(n + 1)
			last = env
			return code == http.StatusOK
		}, 10*time.Second, 100*time.Millisecond) {
			t.Fatalf("after restart %d no acquire was granted; the last answer: %s", n+1, last.Msg)
		}
	}

	// Then `redlockd repair-fences`, every master intact: masters 0–2 get
	// plain markers that carry since= (their loss ended at their earlier
	// repair), the others "kept"; the run ends no loss, and the gate stays
	// open through the registry rounds after it (40 of them, at the 50 ms
	// health interval). A black-box pass had every later run of
	// repair-fences stamp the repaired masters' loss as ending at the run:
	// the registry took their registrations for lost, and every acquire was
	// answered 503 for a registration's life + the max TTL.
	time.Sleep(500 * time.Millisecond) // the health loop evens the fencing counters: none lags
	var out, errOut bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"repair-fences", "--config", writeConfig(t, cfg)}, &out, &errOut), errOut.String())
	require.NotContains(t, out.String(), "lost its data", "every master intact:\n%s", out.String())
	for n, end := 10, time.Now().Add(2*time.Second); time.Now().Before(end); n++ {
		code, env := cycle(n)
		require.Equal(t, http.StatusOK, code, "after repair-fences: %s", env.Msg)
	}

	// Then the daemon restarts (an upgrade, a reschedule): the new one
	// counts the masters the old one admitted (their admissions are on
	// them), not waiting a registration's life + the max TTL after the
	// last repair. A black-box pass restarted a daemon after such a
	// rolling restart of the masters: every acquire 503 "placement
	// registry: … 3 not counted" for the max TTL, /readyz ready.
	require.NoError(t, stop())
	base = daemonURL(t, func(c *config.Config) { c.MaxTTL, c.KeyPrefix = 600, cfg.KeyPrefix })
	url = lockURL(base)
	var last envelope
	if !assert.Eventually(t, func() bool {
		code, env := cycle(100)
		last = env
		return code == http.StatusOK
	}, 10*time.Second, 100*time.Millisecond) {
		t.Fatalf("the restarted daemon granted nothing; the last answer: %s", last.Msg)
	}
}
