package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLockRunKeysHoldsEverySet: while `lock run --keys` runs its command,
// every key of the set is held (a single-key acquire of either is
// refused), the command sees REDLOCK_KEY and REDLOCK_KEYS, and when it
// exits the whole set is released.
func TestLockRunKeysHoldsEverySet(t *testing.T) {
	base := daemonURL(t)
	dir := t.TempDir()
	goFile := filepath.Join(dir, "go")
	p := startLock(t, base, "run", "--keys", "acct:a,acct:b", "--ttl", "5s", "--",
		"sh", "-c", fmt.Sprintf(`echo "$REDLOCK_KEY $REDLOCK_KEYS $REDLOCK_FENCE" > %s/env; while [ ! -e %s ]; do sleep 0.05; done`, dir, goFile))
	env := strings.Fields(waitFile(t, filepath.Join(dir, "env")))
	require.Len(t, env, 3, env)
	assert.Equal(t, "acct:a", env[0])
	assert.Equal(t, "acct:a,acct:b", env[1])
	fence, err := strconv.ParseInt(env[2], 10, 64)
	require.NoError(t, err)
	assert.Positive(t, fence)

	for _, k := range []string{"acct:a", "acct:b"} {
		assert.True(t, held(t, base, k), k)
		code, out, errOut := runLock(t, base, "acquire", "--key", k, "--ttl", "5s")
		assert.Equal(t, exitBusy, code, "a single-key acquire of %s while the set runs: %s", k, errOut)
		assert.Contains(t, out, `"acquired":false`)
	}
	code, out, _ := runLock(t, base, "status", "--keys", "acct:b,acct:a")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, `"fence":`+env[2])

	require.NoError(t, os.WriteFile(goFile, nil, 0o600))
	assert.Equal(t, 0, p.wait(t), p.stderr.String())
	assert.False(t, held(t, base, "acct:a"))
	assert.False(t, held(t, base, "acct:b"))
}

// TestLockRunKeysNoOverlap: four `lock run --keys` over sets of two of
// three keys, asked for in different orders (x,y / y,x / y,z / z,x: every
// two share a key), each command recording its start and end: all four
// complete, none while another ran.
func TestLockRunKeysNoOverlap(t *testing.T) {
	base := daemonURL(t)
	dir := t.TempDir()
	sets := []string{"job:x,job:y", "job:y,job:x", "job:y,job:z", "job:z,job:x"}
	var wg sync.WaitGroup
	codes := make([]int, len(sets))
	stderrs := make([]string, len(sets))
	for i, set := range sets {
		wg.Go(func() {
			p := startLock(t, base, "run", "--keys", set, "--ttl", "5s", "--wait", "20s", "--",
				"sh", "-c", fmt.Sprintf(`date +%%s%%N > %[1]s/%[2]d.start; sleep 0.2; date +%%s%%N > %[1]s/%[2]d.end`, dir, i))
			codes[i] = p.wait(t)
			stderrs[i] = p.stderr.String()
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
	type span struct {
		set        string
		start, end int64
	}
	var spans []span
	for i, set := range sets {
		require.Equal(t, 0, codes[i], "run of %s: %s", set, stderrs[i])
		spans = append(spans, span{set, read(fmt.Sprintf("%s/%d.start", dir, i)), read(fmt.Sprintf("%s/%d.end", dir, i))})
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	for i := 1; i < len(spans); i++ {
		assert.Greater(t, spans[i].start, spans[i-1].end, "%s started before %s ended: %v", spans[i].set, spans[i-1].set, spans)
	}
	for _, k := range []string{"job:x", "job:y", "job:z"} {
		assert.False(t, held(t, base, k), "%s after every run", k)
	}
}

// TestLockKeysOneShot: acquire --keys prints key, keys and the token;
// status, extend and release --keys act on the set in any order.
func TestLockKeysOneShot(t *testing.T) {
	base := daemonURL(t)
	code, out, errOut := runLock(t, base, "acquire", "--keys", "set:a,set:b,set:c", "--ttl", "30s")
	require.Equal(t, 0, code, errOut)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	assert.Equal(t, "set:a", got["key"])
	assert.Equal(t, []any{"set:a", "set:b", "set:c"}, got["keys"])
	assert.Equal(t, true, got["acquired"])
	token := got["token"].(string)

	code, out, _ = runLock(t, base, "acquire", "--keys", "set:z,set:c")
	assert.Equal(t, exitBusy, code, "an overlapping set")
	assert.Contains(t, out, `"keys":["set:z","set:c"],"acquired":false`)
	assert.False(t, held(t, base, "set:z"), "a refused set takes none of its keys")

	code, out, errOut = runLock(t, base, "extend", "--keys", "set:c,set:b,set:a", "--token", token, "--ttl", "60s")
	assert.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `"extended":true,"ttl":60`)
	code, out, _ = runLock(t, base, "status", "--keys", "set:b,set:a,set:c")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, `"held":true`)
	code, _, errOut = runLock(t, base, "release", "--keys", "set:b,set:c,set:a", "--token", token)
	assert.Equal(t, 0, code, errOut)
	for _, k := range []string{"set:a", "set:b", "set:c"} {
		assert.False(t, held(t, base, k), k)
	}
	code, out, _ = runLock(t, base, "status", "--keys", "set:a,set:b,set:c")
	assert.Equal(t, exitNotHeld, code)
	assert.Contains(t, out, `"held":false`)
}

// TestLockKeysBadFlags: --keys against --key, --permits and --slot, and
// bad lists, are usage errors naming the flags; the daemon's limit on
// the number of keys comes back as a usage error naming it.
func TestLockKeysBadFlags(t *testing.T) {
	base := daemonURL(t)
	many := make([]string, 65)
	for i := range many {
		many[i] = "k" + strconv.Itoa(i)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"acquire", "--key", "a", "--keys", "b,c"}, "--key, --keys: give one of them"},
		{[]string{"run", "--keys", "a,b", "--permits", "2", "--ttl", "5s", "--", "true"}, "--keys, --permits: a semaphore has one name"},
		{[]string{"release", "--keys", "a,b", "--slot", "0", "--token", "t"}, "--keys, --slot"},
		{[]string{"acquire", "--keys", "a,,b"}, "key 2 of 3 is empty"},
		{[]string{"acquire", "--keys", "a,b,a"}, `"a" is given twice (keys 1 and 3)`},
		{[]string{"status"}, "--key or --keys: required"},
		{[]string{"run", "--key", "", "--ttl", "5s", "--", "true"}, "--key: must not be empty"},
		{[]string{"acquire", "--keys", strings.Join(many, ",")}, "keys: 65 keys is above the maximum of 64"},
	} {
		code, out, errOut := runLock(t, base, c.args...)
		assert.Equal(t, exitUsage, code, "%v: %s", c.args, errOut)
		assert.Contains(t, errOut, c.want, c.args)
		assert.Empty(t, out, c.args)
	}
	assert.False(t, held(t, base, "k0"), "a refused set takes none of its keys")
}
