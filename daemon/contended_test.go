package daemon

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestContendedAcquireIsNotCalledHeld: masters 0–2 hold the key for an
// attempt that was never granted (no fence record; its client died before
// releasing it). The daemon's one-shot acquire retries it a few times
// (redlock retryContended), then answers acquired:false saying the key is
// contended, not held by an owner, with retry_after 1 — not the keys'
// remaining 30 s, which told two callers that split the votes to wait a
// whole TTL for a key nobody held.
func TestContendedAcquireIsNotCalledHeld(t *testing.T) {
	d := newDeployment(t)
	ts := d.server(t)
	ctx := context.Background()
	rk := redisKey(d.prefix, "acme", "", "split")
	for i, s := range d.servers[:3] {
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		t.Cleanup(func() { c.Close() })
		require.NoError(t, c.Set(ctx, rk, "0123456789abcdef0123456789abcdef", 30*time.Second).Err(), "master %d", i)
		t.Cleanup(func() { c.Del(ctx, rk) })
	}
	r := ts.lock(t, testKeyAcme, `{"key":"split","ttl":30}`)
	data := okData(t, r)
	assert.Equal(t, false, data["acquired"], r.Raw)
	assert.Equal(t, msgContended, r.Env.Msg)
	assert.EqualValues(t, 1, num(t, data, "retry_after"))
	assert.Equal(t, "1", r.Header.Get("Retry-After"))
	r = ts.do(t, http.MethodGet, "/metrics", "", nil)
	assert.Contains(t, r.Raw, "redlock_contended_retries_total 4", "four retries, then the answer")
}
