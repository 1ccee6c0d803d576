package daemon

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLockDelayAcrossDaemons: a lock taken with lock_delay_ms through one
// daemon expires without a release; the other daemon refuses it for the
// delay, saying why and when to retry. A release clears the delay at once.
func TestLockDelayAcrossDaemons(t *testing.T) {
	d := newDeployment(t)
	a, b := d.server(t), d.server(t)
	g := okData(t, a.lock(t, testKeyAcme, `{"action":"acquire","key":"pay:1","ttl":1,"lock_delay_ms":3000}`))
	require.Equal(t, true, g["acquired"])
	time.Sleep(1200 * time.Millisecond) // the holder paused past its TTL
	r := b.lock(t, testKeyAcme, `{"action":"acquire","key":"pay:1","ttl":5}`)
	got := okData(t, r)
	assert.Equal(t, false, got["acquired"])
	assert.Equal(t, msgDelayed, r.Env.Msg)
	ra := num(t, got, "retry_after")
	assert.True(t, ra >= 1 && ra <= 3, "retry_after %d", ra)
	assert.Equal(t, false, okData(t, b.lock(t, testKeyAcme, `{"action":"status","key":"pay:1"}`))["held"], "the lock itself is not held")

	// A release clears the delay at once, even after the lock expired.
	rel := okData(t, a.lock(t, testKeyAcme, `{"action":"release","key":"pay:1","token":"`+g["token"].(string)+`"}`))
	assert.Equal(t, false, rel["released"], "the lock had expired")
	got = okData(t, b.lock(t, testKeyAcme, `{"action":"acquire","key":"pay:1","ttl":5,"lock_delay_ms":60000}`))
	require.Equal(t, true, got["acquired"], got)
	rel = okData(t, b.lock(t, testKeyAcme, `{"action":"release","key":"pay:1","token":"`+got["token"].(string)+`"}`))
	require.Equal(t, true, rel["released"])
	// Through the daemon that released: its release reached every master
	// before this acquire (one lane per key), as for any lock.
	got = okData(t, b.lock(t, testKeyAcme, `{"action":"acquire","key":"pay:1","ttl":5}`))
	assert.Equal(t, true, got["acquired"], "no delay after a release")

	// A semaphore's permit takes a delay too.
	p := okData(t, a.lock(t, testKeyAcme, `{"action":"acquire","key":"sem","ttl":1,"permits":1,"lock_delay_ms":3000}`))
	require.Equal(t, true, p["acquired"])
	time.Sleep(1200 * time.Millisecond)
	r = b.lock(t, testKeyAcme, `{"action":"acquire","key":"sem","ttl":5,"permits":1}`)
	assert.Equal(t, false, okData(t, r)["acquired"])
	assert.Equal(t, msgDelayed, r.Env.Msg)
}

func TestLockDelayBadInput(t *testing.T) {
	d := newDeployment(t)
	a := d.server(t)
	for body, msg := range map[string]string{
		`{"key":"k","lock_delay_ms":60001}`:         "lock_delay_ms: 60001 is above the maximum of 60000",
		`{"key":"k","lock_delay_ms":-1}`:            "lock_delay_ms: -1 is below the minimum of 0",
		`{"key":"k","lock_delay_ms":"5"}`:           "lock_delay_ms: must be an integer number of milliseconds, got a string",
		`{"key":"k","ttl":86400,"lock_delay_ms":1}`: "lock_delay_ms: ttl 86400 s + lock_delay_ms 1 is above max_ttl (86400 s)",
	} {
		r := a.lock(t, testKeyAcme, body)
		assert.Equal(t, http.StatusBadRequest, r.Status, body)
		assert.Equal(t, msg, r.Env.Msg, body)
	}
}
