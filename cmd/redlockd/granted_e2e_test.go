package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/config"
)

// TestNoSecondHolderOverHTTPAfterASilentLoss: the first two ways,
// through the real daemons. Lock L (ttl 2s) lives on masters 0–2 only (a
// lost race left 3 and 4 free); a 300s lock on another key holds every
// lease horizon up. Master 2 goes back to a copy taken before L's extend
// to 30s (SWAPDB with a copied database): its marker, horizon, fencing
// counter and statistics read as before, and its copy of L expires at the
// old time. Neither the daemon that holds L nor another one sharing the
// masters grants L again while it stands: masters 0 and 1 answer that a
// granted lock holds it (acquired:false, retry_after when L ends), and the refusal is
// counted in redlock_grant_refusals_total. With L then lost on masters 3
// and 4 as well (two masters left), acquires are still refused and status
// answers held (it said free before TestStatusHeldOnFewerThanAQuorum's
// fix). The library's
// TestNoSecondHolderAfterASilentLoss has the negative controls.
func TestNoSecondHolderOverHTTPAfterASilentLoss(t *testing.T) {
	ctx := context.Background()
	prefix := fmt.Sprintf("e2e%d:", prefixSeq.Add(1))
	same := func(c *config.Config) { c.KeyPrefix = prefix }
	a := daemonURL(t, same)
	b := daemonURL(t, same)
	rdbs := make([]*redis.Client, len(servers))
	for i, s := range servers {
		rdbs[i] = redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		defer rdbs[i].Close()
	}
	code, env, _ := post(t, lockURL(a), keyA, `{"key":"long","ttl":300}`)
	require.Equal(t, http.StatusOK, code, env.Msg)
	code, env, _ = post(t, lockURL(a), keyA, `{"key":"L","ttl":2}`)
	require.Equal(t, http.StatusOK, code, env.Msg)
	token, _ := env.Data["token"].(string)
	require.NotEmpty(t, token)
	fence := env.Data["fence"]

	keys, err := rdbs[0].Keys(ctx, prefix+"lock:*L").Result()
	require.NoError(t, err)
	require.Len(t, keys, 1)
	raw := keys[0]
	record := prefix + "fence:" + raw
	waitOnEveryMaster(t, raw)
	for _, i := range []int{3, 4} { // as if a contender had won them
		require.NoError(t, rdbs[i].Del(ctx, raw, record).Err())
	}
	// The older copy of master 2, before the extend.
	r := rdbs[victimMaster]
	all, err := r.Keys(ctx, prefix+"*").Result()
	require.NoError(t, err)
	for _, k := range all {
		require.NoError(t, r.Copy(ctx, k, k, 1, true).Err())
	}
	t.Cleanup(func() {
		r1 := redis.NewClient(&redis.Options{Addr: servers[victimMaster].Addr(), DB: 1})
		defer r1.Close()
		_ = r1.FlushDB(context.Background()).Err()
	})
	code, env, _ = post(t, lockURL(a), keyA, `{"action":"extend","key":"L","token":"`+token+`","ttl":30}`)
	require.Equal(t, http.StatusOK, code, env.Msg)
	extendedAt := time.Now()
	require.NoError(t, r.Do(ctx, "SWAPDB", 0, 1).Err())
	require.Eventually(t, func() bool { return r.Exists(ctx, raw).Val() == 0 }, 5*time.Second, 10*time.Millisecond, "master 2 lost L")

	for name, base := range map[string]string{"the holder's daemon": a, "another daemon": b} {
		code, env, _ := post(t, lockURL(base), keyA, `{"key":"L","ttl":5}`)
		assert.Equal(t, http.StatusOK, code, name)
		assert.Equal(t, false, env.Data["acquired"], "%s: %s", name, env.Msg)
		assert.Greater(t, env.Data["retry_after"], float64(20), "%s: retry when L ends", name)
	}
	// The extend put L back on masters 3 and 4 (extend.lua restores a lost
	// copy); lose them again: L lives on masters 0 and 1 only, fewer than
	// a quorum, and their fence records show it granted. Acquires are
	// still refused, and status agrees.
	for _, i := range []int{3, 4} {
		require.NoError(t, rdbs[i].Del(ctx, raw, record).Err())
	}
	for name, base := range map[string]string{"the holder's daemon": a, "another daemon": b} {
		code, env, _ := post(t, lockURL(base), keyA, `{"key":"L","ttl":5}`)
		assert.Equal(t, http.StatusOK, code, name)
		assert.Equal(t, false, env.Data["acquired"], "%s: %s", name, env.Msg)
		code, env, _ = post(t, lockURL(base), keyA, `{"action":"status","key":"L"}`)
		assert.Equal(t, http.StatusOK, code, name)
		assert.Equal(t, true, env.Data["held"], "%s: status of L on two masters: %s", name, env.Msg)
		assert.Equal(t, fence, env.Data["fence"], "%s: L's fence", name)
	}
	require.Less(t, time.Since(extendedAt), 25*time.Second, "L stood all along")
	for i := range 2 {
		assert.Equal(t, token, rdbs[i].Get(ctx, raw).Val(), "master %d still holds L", i)
	}
	resp, err := httpClient.Get(a + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(metrics), "redlock_grant_refusals_total 2")
}

const victimMaster = 2
