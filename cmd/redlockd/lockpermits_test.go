package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLockRunPermits: six `lock run --permits 2` of one key, each command
// recording its start and end: at most two run at once (checked on the
// recorded spans), two do, and each sees its slot in REDLOCK_SLOT.
func TestLockRunPermits(t *testing.T) {
	base := daemonURL(t)
	dir := t.TempDir()
	const procs = 6
	var wg sync.WaitGroup
	codes := make([]int, procs)
	for i := range procs {
		wg.Go(func() {
			p := startLock(t, base, "run", "--key", "job:permits", "--permits", "2", "--ttl", "5s", "--wait", "20s", "--",
				"sh", "-c", fmt.Sprintf(`date +%%s%%N > %[1]s/%[2]d.start; echo $REDLOCK_SLOT > %[1]s/%[2]d.slot; sleep 0.3; date +%%s%%N > %[1]s/%[2]d.end`, dir, i))
			codes[i] = p.wait(t)
		})
	}
	wg.Wait()
	read := func(path string) int64 {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		require.NoError(t, err)
		return n
	}
	type edge struct{ at, delta int64 }
	var edges []edge
	for i := range procs {
		require.Equal(t, 0, codes[i], "every run got a permit in turn")
		edges = append(edges, edge{read(fmt.Sprintf("%s/%d.start", dir, i)), 1}, edge{read(fmt.Sprintf("%s/%d.end", dir, i)), -1})
		slot := read(fmt.Sprintf("%s/%d.slot", dir, i))
		assert.True(t, slot == 0 || slot == 1, "REDLOCK_SLOT %d", slot)
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at != edges[j].at {
			return edges[i].at < edges[j].at
		}
		return edges[i].delta < edges[j].delta
	})
	cur, most := 0, 0
	for _, e := range edges {
		cur += int(e.delta)
		most = max(most, cur)
	}
	assert.LessOrEqual(t, most, 2, "more commands at once than permits")
	assert.Equal(t, 2, most, "six runs never used both permits")
}

// TestLockPermitsOneShot: acquire --permits prints the slot; status
// --permits counts the permits taken; release --slot frees that permit.
func TestLockPermitsOneShot(t *testing.T) {
	base := daemonURL(t)
	code, out, errOut := runLock(t, base, "acquire", "--key", "job:sem1", "--permits", "1", "--ttl", "30s")
	require.Equal(t, 0, code, errOut)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	assert.Equal(t, true, got["acquired"])
	assert.Equal(t, float64(0), got["slot"])
	token := got["token"].(string)

	code, _, errOut = runLock(t, base, "acquire", "--key", "job:sem1", "--permits", "1")
	assert.Equal(t, exitBusy, code, errOut)
	code, out, _ = runLock(t, base, "status", "--key", "job:sem1", "--permits", "1")
	assert.Equal(t, 0, code, "all permits taken: held")
	assert.Contains(t, out, `"taken":1`)
	code, out, _ = runLock(t, base, "status", "--key", "job:sem1", "--permits", "2")
	assert.Equal(t, exitNotHeld, code, "a permit free: not held")
	assert.Contains(t, out, `"permits":2,"taken":1`)

	code, _, errOut = runLock(t, base, "release", "--key", "job:sem1", "--token", token)
	assert.Equal(t, exitNotHeld, code, "without --slot: the lock job:sem1, not held")
	assert.Contains(t, errOut, "lock not held: it expired or was already released (for a semaphore's permit, give the --slot that acquire printed)")
	code, _, errOut = runLock(t, base, "release", "--key", "job:sem1", "--token", token, "--slot", "0")
	assert.Equal(t, 0, code, errOut)
	code, _, errOut = runLock(t, base, "release", "--key", "job:sem1", "--token", token, "--slot", "0")
	assert.Equal(t, exitNotHeld, code, "released already")
	assert.NotContains(t, errOut, "--slot that acquire printed", "a release with --slot gets no hint about --slot")
	code, out, _ = runLock(t, base, "status", "--key", "job:sem1", "--permits", "1")
	assert.Equal(t, exitNotHeld, code)
	assert.Contains(t, out, `"taken":0`)

	code, _, errOut = runLock(t, base, "acquire", "--key", "job:sem1", "--permits", "1001")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "--permits: 1001 is outside 1 to 1000")
	// An explicit 0 is refused (as the API refuses permits 0), not run as
	// a plain lock; a --ttl of 0s is named as such, not as missing.
	code, _, errOut = runLock(t, base, "run", "--key", "job:sem1", "--ttl", "5s", "--permits", "0", "--", "true")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "--permits: 0 is outside 1 to 1000 (leave --permits out for a lock)")
	code, _, errOut = runLock(t, base, "run", "--key", "job:sem1", "--ttl", "0s", "--", "true")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "--ttl: 0s must be a whole number of seconds, at least 1s")
}
