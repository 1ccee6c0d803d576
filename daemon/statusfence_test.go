package daemon

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStatusFenceAcrossDaemons: two daemons over the same masters and key
// prefix. The fence one daemon's acquire returned is what the other's
// status shows (never the token), it survives an extend through the other
// daemon, and it is gone with the lock after the release.
func TestStatusFenceAcrossDaemons(t *testing.T) {
	d := newDeployment(t)
	a, b := d.server(t), d.server(t)

	body := `{"action":"acquire","key":"order:pay:1","ttl":30}`
	r := a.lock(t, testKeyAcme, body)
	got := okData(t, r)
	require.Equal(t, true, got["acquired"])
	token, _ := got["token"].(string)
	fence := num(t, got, "fence")
	require.Positive(t, fence)

	// Another key's acquire moves the counter past this lock's fence.
	other := okData(t, a.lock(t, testKeyAcme, `{"action":"acquire","key":"order:pay:2","ttl":30}`))
	require.Greater(t, num(t, other, "fence"), fence)

	st := okData(t, b.lock(t, testKeyAcme, `{"action":"status","key":"order:pay:1"}`))
	assert.Equal(t, true, st["held"])
	assert.Equal(t, fence, num(t, st, "fence"), "status shows the holder's fence")
	assert.NotContains(t, st, "token")
	assert.NotContains(t, b.lock(t, testKeyAcme, `{"action":"status","key":"order:pay:1"}`).Raw, token)

	ext := okData(t, b.lock(t, testKeyAcme, `{"action":"extend","key":"order:pay:1","token":"`+token+`","ttl":60}`))
	require.Equal(t, true, ext["extended"])
	assert.Equal(t, fence, num(t, ext, "fence"), "extend reports the holder's fence")
	// Extend answers once a quorum has extended; its writes to the other
	// masters may still be in flight, and status decides at the first
	// quorum of answers, so a status read at once may meet an old PTTL
	// and report the (correct, conservative) 30 s. Wait until every
	// master has the extension, then status must show it.
	d.waitPTTLAbove(t, 30*time.Second, redisKey(d.prefix, "acme", "", "order:pay:1"))
	st = okData(t, a.lock(t, testKeyAcme, `{"action":"status","key":"order:pay:1"}`))
	assert.Equal(t, fence, num(t, st, "fence"), "the fence survives the extend")
	assert.Greater(t, num(t, st, "ttl"), int64(30))

	// Another account's lock of the same name is another lock.
	g := okData(t, a.lock(t, testKeyGlobex, `{"action":"status","key":"order:pay:1"}`))
	assert.Equal(t, false, g["held"])
	assert.NotContains(t, g, "fence")

	rel := okData(t, b.lock(t, testKeyAcme, `{"action":"release","key":"order:pay:1","token":"`+token+`"}`))
	require.Equal(t, true, rel["released"])
	st = okData(t, a.lock(t, testKeyAcme, `{"action":"status","key":"order:pay:1"}`))
	assert.Equal(t, false, st["held"])
	assert.NotContains(t, st, "fence")

	// The next holder's status shows the next holder's fence.
	next := okData(t, b.lock(t, testKeyAcme, body))
	st = okData(t, a.lock(t, testKeyAcme, `{"action":"status","key":"order:pay:1"}`))
	assert.Equal(t, num(t, next, "fence"), num(t, st, "fence"))
	assert.Greater(t, num(t, st, "fence"), fence)
}

// TestStatusFenceTwoMastersDown: with two of five masters down, the fence
// is stored on the other three, and status (which then needs all three)
// shows it.
func TestStatusFenceTwoMastersDown(t *testing.T) {
	d := newDeployment(t)
	d.kill(t, 1, 3)
	a := d.server(t)
	got := okData(t, a.lock(t, testKeyAcme, `{"action":"acquire","key":"k","ttl":30}`))
	require.Equal(t, true, got["acquired"])
	st := okData(t, a.lock(t, testKeyAcme, `{"action":"status","key":"k"}`))
	assert.Equal(t, true, st["held"])
	assert.Equal(t, num(t, got, "fence"), num(t, st, "fence"))
}
