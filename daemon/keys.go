package daemon

import (
	"errors"
	"strconv"
	"strings"

	"github.com/redlockd/redlockd/internal/keyenc"
)

// lockSpace is the part of every lock's Redis key that follows the
// configured prefix. The other keys under the same prefix, the fencing
// counter "<prefix>fence", the fence stored with each lock
// "<prefix>fence:<lock key>" (redlock/fence.go), the marker
// "<prefix>marker" (cmd/redlockd serve) and the accounts' limits
// "<prefix>quota:…", "<prefix>rate:…" and "<prefix>held:…"
// (limits/store.go), do not start with "lock:", so a lock key can never
// equal one of them; new bookkeeping keys must not start
// with "lock:" either.
const lockSpace = "lock:"

// redisKey returns the Redis key of the lock (account, namespace, key):
//
//	prefix + "lock:" + enc(account) + ":" + enc(namespace) + ":" + enc(key)
//	enc(s) = decimal len(s) in bytes, no leading zeros + ":" + s
//
// e.g. prefix "redlock:", account "acme", no namespace, key "order:pay:1":
//
//	redlock:lock:4:acme:0::11:order:pay:1
//
// # Why the encoding is injective
//
// Two different triples never give the same Redis key, whatever bytes the
// parts contain (':' included), because decodeRedisKey recovers the triple
// from the key alone, and a function with a left inverse is injective.
// Decoding is unambiguous because each part is length-prefixed: after the
// constant prefix, the reader takes the digits up to the first ':' — the
// length n (the digits cannot contain ':', and canonical decimal has one
// spelling per number) — then exactly n bytes, whatever they are, then the
// literal ':' separator, and repeats. At no step is there a choice, so the
// same key string cannot decode two ways; and the key must end exactly
// after the third part. Namespace "a" + key "b:c" becomes "1:a:3:b:c" and
// namespace "a:b" + key "c" becomes "3:a:b:1:c".
//
// The prefix is constant per daemon, so it takes no part in the argument;
// FuzzKeyInjective checks the property and the round trip.
func redisKey(prefix, account, namespace, key string) string {
	// Built in place at its exact length: one allocation.
	var b strings.Builder
	b.Grow(len(prefix) + len(lockSpace) + partLen(account) + 1 + partLen(namespace) + 1 + partLen(key))
	b.WriteString(prefix)
	b.WriteString(lockSpace)
	keyenc.WritePart(&b, account)
	b.WriteByte(':')
	keyenc.WritePart(&b, namespace)
	b.WriteByte(':')
	keyenc.WritePart(&b, key)
	return b.String()
}

// partLen is the length of writePart's output for s.
func partLen(s string) int {
	n := 1 // the first digit
	for l := len(s); l >= 10; l /= 10 {
		n++
	}
	return n + 1 + len(s)
}

var errNotLockKey = errors.New("not a lock key of this prefix")

// decodeRedisKey inverts redisKey for a given prefix: it shows that
// redisKey is injective, and gives the lock listing (GET /admin/locks) the
// namespace and key of each lock it finds.
func decodeRedisKey(prefix, rk string) (account, namespace, key string, err error) {
	if len(rk) < len(prefix)+len(lockSpace) || rk[:len(prefix)] != prefix || rk[len(prefix):len(prefix)+len(lockSpace)] != lockSpace {
		return "", "", "", errNotLockKey
	}
	rest := rk[len(prefix)+len(lockSpace):]
	var parts [3]string
	for i := range parts {
		if i > 0 {
			if rest == "" || rest[0] != ':' {
				return "", "", "", errNotLockKey
			}
			rest = rest[1:]
		}
		var ok bool
		parts[i], rest, ok = readPart(rest)
		if !ok {
			return "", "", "", errNotLockKey
		}
	}
	if rest != "" {
		return "", "", "", errNotLockKey
	}
	return parts[0], parts[1], parts[2], nil
}

// readPart reads one "<len>:<bytes>" from the front of s.
func readPart(s string) (part, rest string, ok bool) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || i >= len(s) || s[i] != ':' || (i > 1 && s[0] == '0') {
		return "", "", false
	}
	n, err := strconv.Atoi(s[:i])
	if err != nil || n > len(s)-i-1 {
		return "", "", false
	}
	return s[i+1 : i+1+n], s[i+1+n:], true
}
