package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fillMaster gives the master at i a maxmemory just above what it uses,
// with noeviction, and writes filler keys until it refuses writes (OOM).
// Cleanup deletes the fillers and lifts the limit.
func fillMaster(t *testing.T, i int) {
	t.Helper()
	ctx := context.Background()
	r := redis.NewClient(&redis.Options{Addr: servers[i].Addr(), MaxRetries: -1})
	t.Cleanup(func() {
		var cursor uint64
		for {
			keys, next, err := r.Scan(ctx, cursor, "oomfill:*", 1000).Result()
			if err != nil {
				break
			}
			if len(keys) > 0 {
				r.Del(ctx, keys...)
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
		r.ConfigSet(ctx, "maxmemory", "0")
		r.Close()
	})
	used := usedMemory(t, r)
	require.NoError(t, r.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, r.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+1<<20, 10)).Err())
	value := strings.Repeat("x", 8<<10)
	for n := 0; ; n++ {
		err := r.Set(ctx, "oomfill:"+strconv.Itoa(n), value, 0).Err()
		if err != nil {
			require.True(t, redis.HasErrorPrefix(err, "OOM"), "filling master %d: %v", i, err)
			// Full. Redis's used memory moves by kilobytes as buffers come
			// and go; the limit goes 256 KiB below it so that the master
			// stays full for the test rather than on and off.
			full := usedMemory(t, r)
			require.NoError(t, r.ConfigSet(ctx, "maxmemory", strconv.FormatInt(full-256<<10, 10)).Err())
			return
		}
		require.Less(t, n, 10000, "master %d never refused a write", i)
	}
}

func usedMemory(t *testing.T, r *redis.Client) int64 {
	t.Helper()
	info, err := r.Info(context.Background(), "memory").Result()
	require.NoError(t, err)
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			used, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			return used
		}
	}
	t.Fatal("INFO memory has no used_memory")
	return 0
}

// Masters whose memory is full (maxmemory, noeviction) refuse writes
// while they answer PING and reads. With three of five so, an acquire is
// answered 503 with a message that says so (not "3 down"), /readyz is
// 503 and shows each such master as "oom" with the reason, and the
// metrics show which. Once memory is freed, they count again.
func TestMastersRefusingWritesOOM(t *testing.T) {
	base := daemonURL(t)
	st, env, _ := post(t, lockURL(base), keyA, `{"key":"oom-before"}`)
	require.Equal(t, http.StatusOK, st, env.Msg)
	for _, i := range []int{0, 1, 2} {
		fillMaster(t, i)
	}

	st, env, h := post(t, lockURL(base), keyA, `{"key":"oom-during"}`)
	assert.Equal(t, http.StatusServiceUnavailable, st)
	assert.Equal(t, "quorum_unavailable", env.Code)
	assert.Contains(t, env.Msg, "3 refusing writes (OOM")
	assert.NotContains(t, env.Msg, "down")
	assert.NotEmpty(t, h.Get("Retry-After"))

	type readyz struct {
		Ready  bool   `json:"ready"`
		Status string `json:"status"`
		Quorum struct {
			Counting, Writable int
		} `json:"quorum"`
		Masters []struct {
			Addr           string `json:"addr"`
			State          string `json:"state"`
			RefusingWrites bool   `json:"refusing_writes"`
			WriteRefusal   string `json:"write_refusal"`
		} `json:"masters"`
	}
	var rz readyz
	require.Eventually(t, func() bool {
		resp, err := httpClient.Get(base + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		rz = readyz{}
		return json.NewDecoder(resp.Body).Decode(&rz) == nil && resp.StatusCode == http.StatusServiceUnavailable
	}, 5*time.Second, 20*time.Millisecond, "/readyz stays 200 with three masters refusing writes")
	assert.False(t, rz.Ready)
	assert.Equal(t, "no_quorum", rz.Status)
	assert.Equal(t, 2, rz.Quorum.Writable)
	for i, m := range rz.Masters {
		if i < 3 {
			assert.Equal(t, "oom", m.State, "master %d", i)
			assert.True(t, m.RefusingWrites, "master %d", i)
			assert.Contains(t, m.WriteRefusal, "maxmemory", "master %d", i)
		} else {
			assert.Equal(t, "up", m.State, "master %d", i)
			assert.False(t, m.RefusingWrites, "master %d", i)
		}
	}
	for i := range 5 {
		a := servers[i].Addr()
		want := float64(0)
		if i < 3 {
			want = 1
			assert.Positive(t, metricValue(t, base, `redlock_master_write_refusals_total{master="`+a+`"}`), "master %d", i)
		}
		assert.Equal(t, want, metricValue(t, base, `redlock_master_refusing_writes{master="`+a+`"}`), "master %d", i)
		assert.Equal(t, want, metricValue(t, base, `redlock_master_state{master="`+a+`",state="oom"}`), "master %d", i)
	}
	assert.Equal(t, float64(0), metricValue(t, base, "redlock_quorum_available"))

	// Memory freed: the probes see it, and locks are granted again.
	for _, i := range []int{0, 1, 2} {
		r := redis.NewClient(&redis.Options{Addr: servers[i].Addr(), MaxRetries: -1})
		require.NoError(t, r.ConfigSet(context.Background(), "maxmemory", "0").Err())
		r.Close()
	}
	require.Eventually(t, func() bool {
		st, _, _ := post(t, lockURL(base), keyA, `{"key":"oom-after"}`)
		return st == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond, "locks granted again once memory is freed")
}
