package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Lock is a lock obtained by Acquire. Its validity is the time left before
// the lock may be granted to someone else, computed as in the Redis Redlock
// page: ttl − elapsed − drift, measured on the monotonic clock from before
// the first SET was sent. Work that must not overlap with another holder
// must finish within Validity, and should also pass Fence to the resource.
//
// A Lock is safe for concurrent use.
type Lock struct {
	c     *Client
	key   string
	keys  []string // every key of a multi-key lock (AcquireMulti); nil for one key
	token string
	fence int64

	mu         sync.Mutex
	ttl        time.Duration
	validUntil time.Time // carries a monotonic reading

	keep keepAlive // Done, Err, KeepAlive: keepalive.go
}

// Key returns the Redis key of the lock; for a multi-key lock
// (AcquireMulti), its first key.
func (l *Lock) Key() string { return l.key }

// Keys returns every key of the lock: the keys of a multi-key lock, in the
// order given to AcquireMulti, or the one key.
func (l *Lock) Keys() []string {
	if l.keys == nil {
		return []string{l.key}
	}
	return slices.Clone(l.keys)
}

// set is the lockSet the lock's release and extends act on.
func (l *Lock) set() *lockSet {
	if l.keys == nil {
		return &lockSet{key: l.key, vote: l.c.voteKeys(l.key)}
	}
	return l.c.multiSet(l.keys)
}

// Token returns the random token that proves ownership; pass it to Release
// and Extend. Treat it as a secret.
func (l *Lock) Token() string { return l.token }

// Fence returns the fencing token: 0 when fencing is not enabled.
func (l *Lock) Fence() int64 { return l.fence }

// TTL returns the TTL of the last successful acquire or extend: the ttl
// asked for, or on a Lock returned by Client.Extend or ExtendMulti the
// TTL granted when a lock-delay capped it (see Client.Extend).
func (l *Lock) TTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// ValidUntil returns the end of validity (with a monotonic clock reading).
func (l *Lock) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// Validity returns the time left before the lock may be granted to someone
// else, or 0 once it has passed or Release was called (the key may be
// granted again at once). ValidUntil is unchanged by Release.
func (l *Lock) Validity() time.Duration {
	l.keep.mu.Lock()
	releasing := l.keep.releasing
	l.keep.mu.Unlock()
	if releasing {
		return 0
	}
	return max(time.Until(l.ValidUntil()), 0)
}

// Release releases the lock on every master, and closes Done (Err then
// matches ErrReleased unless the lock was lost before). See Client.Release.
func (l *Lock) Release(ctx context.Context) error {
	l.released()
	if l.keys == nil {
		// One key: the release names the key and its records, not the
		// vote's keys (releaseCall), so they are not built.
		_, err := l.c.releaseSet(ctx, &lockSet{key: l.key}, l.token)
		return err
	}
	_, err := l.c.releaseSet(ctx, l.c.multiSet(l.keys), l.token)
	return err
}

// Extend makes the lock last at least ttl more on a quorum (never shorter
// than it already was) and moves its validity later when the new one is.
// A lock with a lock-delay (WithLockDelay) is extended to at most the max
// TTL minus the delay, so that its delay record never outlives the max TTL
// (the bound Acquire checks); ValidUntil tells how far. See Client.Extend.
//
// An extend refused (an error matching ErrNotHeld: a quorum answered, too
// few of them still hold the token) ends the lock as lost: Err returns
// ErrLost with that error joined, and Done is closed.
//
// Once the lock has ended for its holder — Done closed, or Err returned an
// error: lost, or released — Extend sends nothing and returns an error
// matching ErrNotHeld and that one (ErrLost or ErrReleased): a lock its
// holder was told to stop using is not revived, as an etcd session's
// lease is not.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	l.keep.mu.Lock()
	ended := l.keep.err
	l.keep.mu.Unlock()
	if ended != nil {
		return fmt.Errorf("%w: extend not sent: %w", ErrNotHeld, ended)
	}
	validUntil, _, _, err := l.c.extendSet(ctx, l.set(), l.token, ttl, l.fence)
	if err != nil {
		if errors.Is(err, ErrNotHeld) {
			// Refused: a quorum answered and not enough of them still
			// hold the token. The lock is lost for its holder, whoever
			// called Extend (ErrLost; KeepAlive does the same): Err
			// reports it and Done closes at once, not at the end of a
			// validity that no quorum backs any more (a black-box pass
			// found Err nil after a refused Extend).
			l.keep.mu.Lock()
			l.keep.endLocked(errors.Join(ErrLost, err))
			l.keep.mu.Unlock()
		}
		return err
	}
	l.mu.Lock()
	// An extend never shortens the keys, so the validity already known
	// still holds when the new one (from a shorter ttl) is earlier.
	l.ttl = ttl
	if validUntil.After(l.validUntil) {
		l.validUntil = validUntil
	}
	l.mu.Unlock()
	return nil
}
