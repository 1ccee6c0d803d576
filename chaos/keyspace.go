package chaos

import "strconv"

// KeySpace is the daemon's Redis key layout (daemon/keys.go), repeated here
// so that library clients in a drill take the very same locks, and draw
// from the same fencing counter, as HTTP clients of the daemons:
//
//	Prefix + "lock:" + len(Account) ":" Account ":" len(Namespace) ":" Namespace ":" len(key) ":" key
//
// The fencing counter is Prefix+"fence" and the marker Prefix+"marker", as
// `redlockd serve` configures them.
type KeySpace struct {
	Prefix    string // "redlock:"
	Account   string // the account of the daemon API key the drill uses
	Namespace string // "" or a sub-space; the drills use "chaos"
}

// LockKey returns the Redis key of the lock key.
func (s KeySpace) LockKey(key string) string {
	b := []byte(s.Prefix + "lock:")
	for i, part := range []string{s.Account, s.Namespace, key} {
		if i > 0 {
			b = append(b, ':')
		}
		b = strconv.AppendInt(b, int64(len(part)), 10)
		b = append(b, ':')
		b = append(b, part...)
	}
	return string(b)
}

// LockPattern matches every lock key of this account and namespace, for
// SCAN.
func (s KeySpace) LockPattern() string {
	p := s.LockKey("")
	return globEscape(p[:len(p)-len("0:")]) + "*"
}

// FenceKey is the fencing counter.
func (s KeySpace) FenceKey() string { return s.Prefix + "fence" }

// MarkerKey is the restart marker.
func (s KeySpace) MarkerKey() string { return s.Prefix + "marker" }

func globEscape(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return string(b)
}
