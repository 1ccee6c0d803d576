package daemon

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSemaphoreAcrossDaemons: two daemons over the same masters serve one
// semaphore of two permits: two holders (each its own token, fence and
// slot), a third refused with retry_after, status counting the permits
// taken, extend and release by slot through the other daemon, and the
// freed permit granted again.
func TestSemaphoreAcrossDaemons(t *testing.T) {
	d := newDeployment(t)
	a, b := d.server(t), d.server(t)
	acquire := `{"action":"acquire","key":"export:merchant_5","ttl":30,"permits":2}`

	g1 := okData(t, a.lock(t, testKeyAcme, acquire))
	require.Equal(t, true, g1["acquired"], g1)
	g2 := okData(t, b.lock(t, testKeyAcme, acquire))
	require.Equal(t, true, g2["acquired"], g2)
	assert.Equal(t, int64(2), num(t, g1, "permits"))
	s1, s2 := num(t, g1, "slot"), num(t, g2, "slot")
	assert.ElementsMatch(t, []int64{0, 1}, []int64{s1, s2})
	assert.NotEqual(t, g1["token"], g2["token"])
	assert.Positive(t, num(t, g1, "fence"))
	assert.Positive(t, num(t, g2, "fence"))

	r := a.lock(t, testKeyAcme, acquire)
	g3 := okData(t, r)
	assert.Equal(t, false, g3["acquired"])
	assert.Equal(t, "every permit of the semaphore is held", r.Env.Msg)
	assert.Positive(t, num(t, g3, "retry_after"))
	assert.NotEmpty(t, r.Header.Get("Retry-After"))

	// A plain lock of the same name is another lock.
	plain := okData(t, a.lock(t, testKeyAcme, `{"action":"status","key":"export:merchant_5"}`))
	assert.Equal(t, false, plain["held"])

	st := okData(t, b.lock(t, testKeyAcme, `{"action":"status","key":"export:merchant_5","permits":2}`))
	assert.Equal(t, true, st["held"], "every permit taken")
	assert.Equal(t, int64(2), num(t, st, "taken"))
	assert.Greater(t, num(t, st, "next_free_ms"), int64(25_000))
	st3 := okData(t, b.lock(t, testKeyAcme, `{"action":"status","key":"export:merchant_5","permits":3}`))
	assert.Equal(t, false, st3["held"], "one of three free")
	assert.Equal(t, int64(2), num(t, st3, "taken"))

	tok1 := g1["token"].(string)
	slot1 := strconv.FormatInt(s1, 10)
	ext := okData(t, b.lock(t, testKeyAcme, `{"action":"extend","key":"export:merchant_5","token":"`+tok1+`","slot":`+slot1+`,"ttl":60}`))
	require.Equal(t, true, ext["extended"], ext)
	assert.Equal(t, num(t, g1, "fence"), num(t, ext, "fence"))

	// Without its slot, the token names the plain lock, which it does not hold.
	rel := okData(t, b.lock(t, testKeyAcme, `{"action":"release","key":"export:merchant_5","token":"`+tok1+`"}`))
	assert.Equal(t, false, rel["released"])
	// The other slot is another lock.
	other := strconv.FormatInt(s2, 10)
	rel = okData(t, b.lock(t, testKeyAcme, `{"action":"release","key":"export:merchant_5","token":"`+tok1+`","slot":`+other+`}`))
	assert.Equal(t, false, rel["released"])
	rel = okData(t, b.lock(t, testKeyAcme, `{"action":"release","key":"export:merchant_5","token":"`+tok1+`","slot":`+slot1+`}`))
	assert.Equal(t, true, rel["released"], rel)
	// A slot the token does not hold, free: the answer names the slot and
	// that the token may hold another (a black-box pass read "expired or
	// already released" for a permit it held under another slot).
	r = b.lock(t, testKeyAcme, `{"action":"release","key":"export:merchant_5","token":"`+tok1+`","slot":`+slot1+`}`)
	assert.Equal(t, false, okData(t, r)["released"])
	assert.Equal(t, "permit not held at slot "+slot1+": it expired or was already released, or this token holds another slot (send the slot its acquire answered)", r.Env.Msg)

	st = okData(t, a.lock(t, testKeyAcme, `{"action":"status","key":"export:merchant_5","permits":2}`))
	assert.Equal(t, false, st["held"])
	assert.Equal(t, int64(1), num(t, st, "taken"))
	// Through the daemon that released: its release reached every master
	// before this acquire (one lane per key), as for any lock.
	g4 := okData(t, b.lock(t, testKeyAcme, acquire))
	require.Equal(t, true, g4["acquired"])
	assert.Equal(t, s1, num(t, g4, "slot"), "the released permit is the free one")
	assert.Greater(t, num(t, g4, "fence"), num(t, g1, "fence"))
}

// TestSemaphoreWaitAcrossDaemons: an acquire with wait_ms on a full
// semaphore gets the permit released through another daemon.
func TestSemaphoreWaitAcrossDaemons(t *testing.T) {
	d := newDeployment(t)
	a, b := d.server(t), d.server(t)
	g := okData(t, a.lock(t, testKeyAcme, `{"action":"acquire","key":"sem-wait","ttl":30,"permits":1}`))
	require.Equal(t, true, g["acquired"])
	got := make(chan *response, 1)
	go func() {
		got <- b.lock(t, testKeyAcme, `{"action":"acquire","key":"sem-wait","ttl":30,"permits":1,"wait_ms":2000}`)
	}()
	time.Sleep(100 * time.Millisecond)
	rel := okData(t, a.lock(t, testKeyAcme, `{"action":"release","key":"sem-wait","token":"`+g["token"].(string)+`","slot":0}`))
	require.Equal(t, true, rel["released"])
	w := okData(t, <-got)
	assert.Equal(t, true, w["acquired"], w)
	assert.Equal(t, int64(0), num(t, w, "slot"))
}

// TestSemaphoreBadInput: permits and slot outside their ranges are refused
// with the field and the limit named, and write nothing.
func TestSemaphoreBadInput(t *testing.T) {
	d := newDeployment(t)
	a := d.server(t)
	tok := `"token":"0123456789abcdef0123456789abcdef"`
	for _, c := range []struct{ body, msg string }{
		{`{"key":"s","permits":0}`, "permits: 0 is below the minimum of 1"},
		{`{"key":"s","permits":1001}`, "permits: 1001 is above the maximum of 1000"},
		{`{"key":"s","permits":"3"}`, "permits: must be an integer number of permits, got a string"},
		{`{"key":"s","action":"status","permits":2.5}`, "permits: must be an integer number of permits, got 2.5"},
		{`{"key":"s","action":"release",` + tok + `,"slot":1000}`, "slot: 1000 is above the maximum of 999"},
		{`{"key":"s","action":"extend",` + tok + `,"slot":-1}`, "slot: -1 is below the minimum of 0"},
	} {
		r := a.lock(t, testKeyAcme, c.body)
		assert.Equal(t, http.StatusBadRequest, r.Status, c.body)
		assert.Equal(t, c.msg, r.Env.Msg, c.body)
	}
	st := okData(t, a.lock(t, testKeyAcme, `{"action":"status","key":"s","permits":1000}`))
	assert.Equal(t, int64(0), num(t, st, "taken"), "nothing was written")
}
