package daemon

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The limiter remembers at most max sources whatever the number that
// fail, forgetting the one that failed least recently; a source's bucket
// empties after burst failures and refills at the configured rate.
func TestAuthLimiterBounded(t *testing.T) {
	l := newAuthLimiter(60, 3, 100)
	now := time.Unix(1_800_000_000, 0)
	for i := range 10000 {
		src, ok := authSource(fmt.Sprintf("10.%d.%d.%d:1234", i>>16&255, i>>8&255, i&255))
		require.True(t, ok)
		l.failed(src, now)
	}
	assert.Equal(t, 100, l.sources())

	src, _ := authSource("192.0.2.1:5")
	for range 3 {
		_, blocked := l.blocked(src, now)
		assert.False(t, blocked)
		l.failed(src, now)
	}
	wait, blocked := l.blocked(src, now)
	assert.True(t, blocked)
	assert.Equal(t, time.Second, wait, "one token a second at 60 a minute")
	_, blocked = l.blocked(src, now.Add(time.Second))
	assert.False(t, blocked, "refilled")
	assert.Equal(t, 100, l.sources())

	// IPv6 sources are counted per /64; IPv4-mapped addresses as IPv4.
	a, _ := authSource("[2001:db8:1:2::1]:80")
	b, _ := authSource("[2001:db8:1:2:ffff::9]:80")
	c, _ := authSource("[2001:db8:1:3::1]:80")
	assert.Equal(t, a, b)
	assert.NotEqual(t, a, c)
	m, _ := authSource("[::ffff:192.0.2.1]:5")
	assert.Equal(t, netip.MustParsePrefix("192.0.2.1/32"), m)
	_, ok := authSource("@")
	assert.False(t, ok)
}
