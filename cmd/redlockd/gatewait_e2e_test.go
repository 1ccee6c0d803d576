package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWaitingAcquireOutlastsARegistryOutage: docs/api.md, "Waiting": while
// no quorum can vote, a waiting acquire keeps waiting within its wait_ms.
// Three masters pause for longer than the layout gate's permit (half a
// registration's life: 1 s at the tests' 50 ms health interval), so the
// placement registry hears no quorum and the gate refuses; an acquire
// with wait_ms 10000 sent then must wait, and win once the masters come
// back 1.5 s later. A black-box pass saw such acquires (and `lock run
// --wait`) answered 503 "placement registry: no quorum" in a few
// milliseconds: the gate's refusal ended the wait. The same acquire
// without wait_ms is still refused at once (the negative side).
func TestWaitingAcquireOutlastsARegistryOutage(t *testing.T) {
	base := daemonURL(t)
	url := lockURL(base)
	gate := func() (granting bool, refusal string) {
		resp, err := httpClient.Get(base + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		var body struct {
			Gate *struct {
				Granting bool   `json:"granting"`
				Refusal  string `json:"refusal"`
			} `json:"gate"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		require.NotNil(t, body.Gate, "/readyz shows the gate of a daemon under it")
		return body.Gate.Granting, body.Gate.Refusal
	}
	require.Eventually(t, func() bool { g, _ := gate(); return g }, 10*time.Second, 50*time.Millisecond, "/readyz: granting")
	paused := []int{2, 3, 4}
	for _, i := range paused {
		require.NoError(t, servers[i].Pause())
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			for _, i := range paused {
				require.NoError(t, servers[i].Resume())
			}
		}
	}
	t.Cleanup(resume)
	// The permit runs out, and the gate has heard a round without a
	// quorum after it: an acquire that does not wait is refused.
	require.Eventually(t, func() bool {
		code, env, _ := post(t, url, keyA, `{"key":"gate-wait","ttl":10}`)
		return code == http.StatusServiceUnavailable && strings.Contains(env.Msg, "placement")
	}, 10*time.Second, 100*time.Millisecond, "the gate refuses once the permit ran out")
	granting, refusal := gate()
	assert.False(t, granting, "/readyz: not granting")
	assert.Contains(t, refusal, "placement registry heard no quorum", "/readyz says why")

	type answer struct {
		env  envelope
		err  error
		when time.Time
	}
	got := make(chan answer, 1)
	go func() {
		env, err := tryPost(httpClient, url, keyA, `{"key":"gate-wait","ttl":10,"wait_ms":10000}`)
		got <- answer{env, err, time.Now()}
	}()
	select {
	case a := <-got:
		t.Fatalf("the waiting acquire answered before the masters came back: %+v %v", a.env, a.err)
	case <-time.After(1500 * time.Millisecond):
	}
	resumedAt := time.Now()
	resume()
	a := <-got
	require.NoError(t, a.err)
	assert.Equal(t, true, a.env.Data["acquired"], "won within wait_ms once the masters came back: %s", a.env.Msg)
	assert.True(t, a.when.After(resumedAt))
}
