package daemon

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRedisKeyLayout(t *testing.T) {
	assert.Equal(t, "redlock:lock:4:acme:0::11:order:pay:1", redisKey("redlock:", "acme", "", "order:pay:1"))
	assert.Equal(t, "lock:1:a:2:ns:1:k", redisKey("", "a", "ns", "k"))
	// The design's example: the separator inside parts cannot shift them.
	assert.NotEqual(t, redisKey("p:", "acct", "a", "b:c"), redisKey("p:", "acct", "a:b", "c"))
	assert.Equal(t, "p:lock:4:acct:1:a:3:b:c", redisKey("p:", "acct", "a", "b:c"))
	assert.Equal(t, "p:lock:4:acct:3:a:b:1:c", redisKey("p:", "acct", "a:b", "c"))
}

// triples that would collide under a naive "account:namespace:key" join.
var collidingTriples = [][3]string{
	{"a", "b", "c:d"},
	{"a", "b:c", "d"},
	{"a:b", "c", "d"},
	{"a", "", "b:c:d"},
	{"a", "b:c:d", "x"},
	{"acme", "1:x", "y"},
	{"acme", "1", "x:1:y"},
	{"acme", "0:", ""},
	{"acme", "", "0:"},
	{"2:ac", "", "me"},
	{"a", "", "1:b"},
	{"a", "1:b", ""},
	{"", "", ""},
	{"é", "ü", "🔒"},
}

func TestRedisKeyInjective(t *testing.T) {
	seen := map[string][3]string{}
	for _, tr := range collidingTriples {
		rk := redisKey("pre:", tr[0], tr[1], tr[2])
		if prev, dup := seen[rk]; dup {
			t.Fatalf("%q and %q both give %q", prev, tr, rk)
		}
		seen[rk] = tr
		a, n, k, err := decodeRedisKey("pre:", rk)
		require.NoError(t, err, rk)
		assert.Equal(t, tr, [3]string{a, n, k})
	}
}

func TestDecodeRedisKeyRejects(t *testing.T) {
	for _, rk := range []string{
		"", "pre:", "pre:lock:", "pre:lock:1:a", "pre:lock:1:a:1:b", "pre:lock:1:a:1:b:1:cX",
		"pre:lock:01:a:0::0:", "pre:lock:9:a:0::0:", "pre:lock:x:a:0::0:", "other:lock:0::0::0:",
		"pre:fence:0::0::0:", "pre:lock:0:0::0:",
	} {
		_, _, _, err := decodeRedisKey("pre:", rk)
		assert.Error(t, err, rk)
	}
}

// FuzzKeyInjective: distinct (account, namespace, key) triples never share
// a Redis key, and every Redis key decodes back to its triple.
func FuzzKeyInjective(f *testing.F) {
	for i, a := range collidingTriples {
		b := collidingTriples[(i+1)%len(collidingTriples)]
		f.Add(a[0], a[1], a[2], b[0], b[1], b[2])
	}
	f.Fuzz(func(t *testing.T, a1, n1, k1, a2, n2, k2 string) {
		const prefix = "redlock:"
		r1, r2 := redisKey(prefix, a1, n1, k1), redisKey(prefix, a2, n2, k2)
		same := a1 == a2 && n1 == n2 && k1 == k2
		if same != (r1 == r2) {
			t.Fatalf("(%q,%q,%q) → %q and (%q,%q,%q) → %q", a1, n1, k1, r1, a2, n2, k2, r2)
		}
		a, n, k, err := decodeRedisKey(prefix, r1)
		if err != nil || a != a1 || n != n1 || k != k1 {
			t.Fatalf("decode %q = (%q,%q,%q,%v), want (%q,%q,%q)", r1, a, n, k, err, a1, n1, k1)
		}
	})
}
