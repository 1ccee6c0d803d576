package daemon

import (
	"context"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// Locker is the lock actions the daemon serves: a quorum of Redis masters
// in production (NewRedlockLocker), or anything with the same behaviour in
// tests. Keys given to it are full Redis keys; errors follow the redlock
// package (*redlock.OutcomeError matching redlock.ErrLockHeld,
// ErrQuorumUnavailable or ErrNotHeld). The health of the masters behind it
// is a MasterHealth of its own (Options.Health).
//
// It is not *redlock.Client itself because a *redlock.Lock can only be made
// by a Client and redlock.AcquireOption is opaque, so nothing but a real
// Client could implement the Client's own method set. The adapter is a few
// lines; see NewRedlockLocker.
type Locker interface {
	// Acquire obtains req.Key for req.TTL, retrying for up to req.Wait
	// (0: one attempt); with req.Permits > 0, one permit of the semaphore
	// req.Key (redlock.Client.AcquirePermit), whose Lease.Slot says which:
	// its lock key is redlock.PermitKey(req.Key, Slot).
	Acquire(ctx context.Context, req AcquireRequest) (Lease, error)
	// Release deletes key on every master where token holds it.
	Release(ctx context.Context, key, token string) (int, error)
	// ReleaseMulti, ExtendMulti and StatusMulti act on the keys of a
	// multi-key lock (AcquireRequest.Keys) as a whole, as
	// redlock.Client.ReleaseMulti, ExtendMulti and StatusMulti.
	ReleaseMulti(ctx context.Context, keys []string, token string) (int, error)
	ExtendMulti(ctx context.Context, keys []string, token string, ttl time.Duration) (Lease, error)
	StatusMulti(ctx context.Context, keys []string) (redlock.MultiStatus, error)
	// Extend resets the TTL of key, held by token, to ttl.
	Extend(ctx context.Context, key, token string, ttl time.Duration) (Lease, error)
	// Status is a majority read of key; it never reveals the token.
	Status(ctx context.Context, key string) (redlock.Status, error)
	// SemaphoreStatus reads the permits 0 … permits−1 of the semaphore
	// key, as redlock.Client.SemaphoreStatus.
	SemaphoreStatus(ctx context.Context, key string, permits int) (redlock.SemaphoreStatus, error)
	// List is one page of the locks held whose keys start with prefix, as
	// redlock.Client.List: cursor "" starts, count is 1 to
	// redlock.MaxListCount; errors match redlock.ErrInvalid (a bad cursor
	// or count, the message naming it) or redlock.ErrQuorumUnavailable.
	List(ctx context.Context, prefix, cursor string, count int) (redlock.ListPage, error)
}

// Lease is a lock granted by Acquire or renewed by Extend.
type Lease struct {
	// Token proves ownership: 32 lowercase hex characters. A secret.
	Token string
	// Fence is the fencing token, 0 while fencing is not enabled; the API
	// omits data.fence when it is 0.
	Fence int64
	// ValidUntil is the end of validity, with a monotonic clock reading.
	ValidUntil time.Time
	// Slot is the permit a semaphore's acquire took (AcquireRequest.Permits
	// > 0); 0 otherwise.
	Slot int
	// TTL is, for an extend, the Lock's TTL (redlock.Client.Extend): the
	// ttl asked for, or less when its lock-delay capped it at max_ttl
	// minus the delay. 0 when not known.
	TTL time.Duration
}

// extendedLease is the Lease of an extended lock, with the TTL granted.
func extendedLease(lk *redlock.Lock) Lease {
	return Lease{Token: lk.Token(), Fence: lk.Fence(), ValidUntil: lk.ValidUntil(), TTL: lk.TTL()}
}

// AcquireRequest is what the Server asks Locker.Acquire for.
type AcquireRequest struct {
	// Key is the full Redis key.
	Key string
	// Keys, when not nil, are the full Redis keys of a multi-key lock (2
	// to redlock.MaxMultiKeys, Key being Keys[0]): every key or none
	// (redlock.Client.AcquireMulti).
	Keys []string
	// TTL is the lock's time to live, whole seconds from the API.
	TTL time.Duration
	// Wait is how long to keep retrying while the lock is held; 0: one
	// attempt.
	Wait time.Duration
	// LockDelay is the lock-delay (redlock.WithLockDelay): nobody acquires
	// the key for this long after the lock ended without a release. 0: none.
	LockDelay time.Duration
	// Permits > 0 asks for one permit of the semaphore Key with that many
	// permits (at most redlock.MaxPermits); 0 asks for the lock Key.
	Permits int
	// StopWaiting is closed when the Server starts shutting down (nil for
	// a request that does not wait). A Locker should then stop waiting and
	// return the last attempt's answer (a held lock is answered
	// acquired:false with retry_after) instead of letting the shutdown cut
	// the request off.
	StopWaiting <-chan struct{}
}

// NewRedlockLocker adapts a *redlock.Client to Locker and MasterHealth.
// The Client stays the caller's to Close, after Server.Run has returned.
func NewRedlockLocker(c *redlock.Client) MasterLocker { return redlockLocker{c} }

type redlockLocker struct{ c *redlock.Client }

// acquireOptions are the redlock options of req's wait and lock-delay.
func acquireOptions(req AcquireRequest) []redlock.AcquireOption {
	var opts []redlock.AcquireOption
	if req.Wait > 0 {
		opts = []redlock.AcquireOption{redlock.WithWait(req.Wait), redlock.WithStopWaiting(req.StopWaiting)}
	}
	if req.LockDelay > 0 {
		opts = append(opts, redlock.WithLockDelay(req.LockDelay))
	}
	return opts
}

func (l redlockLocker) Acquire(ctx context.Context, req AcquireRequest) (Lease, error) {
	opts := acquireOptions(req)
	if req.Keys != nil {
		lk, err := l.c.AcquireMulti(ctx, req.Keys, req.TTL, opts...)
		if err != nil {
			return Lease{}, err
		}
		return Lease{Token: lk.Token(), Fence: lk.Fence(), ValidUntil: lk.ValidUntil()}, nil
	}
	if req.Permits > 0 {
		p, err := l.c.AcquirePermit(ctx, req.Key, req.Permits, req.TTL, opts...)
		if err != nil {
			return Lease{}, err
		}
		return Lease{Token: p.Token(), Fence: p.Fence(), ValidUntil: p.ValidUntil(), Slot: p.Slot}, nil
	}
	lk, err := l.c.Acquire(ctx, req.Key, req.TTL, opts...)
	if err != nil {
		return Lease{}, err
	}
	return Lease{Token: lk.Token(), Fence: lk.Fence(), ValidUntil: lk.ValidUntil()}, nil
}

func (l redlockLocker) Release(ctx context.Context, key, token string) (int, error) {
	return l.c.Release(ctx, key, token)
}

func (l redlockLocker) Extend(ctx context.Context, key, token string, ttl time.Duration) (Lease, error) {
	lk, err := l.c.Extend(ctx, key, token, ttl)
	if err != nil {
		return Lease{}, err
	}
	return extendedLease(lk), nil
}

func (l redlockLocker) ReleaseMulti(ctx context.Context, keys []string, token string) (int, error) {
	return l.c.ReleaseMulti(ctx, keys, token)
}

func (l redlockLocker) ExtendMulti(ctx context.Context, keys []string, token string, ttl time.Duration) (Lease, error) {
	lk, err := l.c.ExtendMulti(ctx, keys, token, ttl)
	if err != nil {
		return Lease{}, err
	}
	return extendedLease(lk), nil
}

func (l redlockLocker) StatusMulti(ctx context.Context, keys []string) (redlock.MultiStatus, error) {
	return l.c.StatusMulti(ctx, keys)
}

func (l redlockLocker) Status(ctx context.Context, key string) (redlock.Status, error) {
	return l.c.Status(ctx, key)
}

func (l redlockLocker) SemaphoreStatus(ctx context.Context, key string, permits int) (redlock.SemaphoreStatus, error) {
	return l.c.SemaphoreStatus(ctx, key, permits)
}

func (l redlockLocker) List(ctx context.Context, prefix, cursor string, count int) (redlock.ListPage, error) {
	return l.c.List(ctx, prefix, cursor, count)
}

func (l redlockLocker) Masters() []redlock.MasterStatus  { return l.c.Masters() }
func (l redlockLocker) Quorum() int                      { return l.c.VotesNeeded() }
func (l redlockLocker) LongestMaxTTL() time.Duration     { return l.c.LongestMaxTTL() }
func (l redlockLocker) ClockBounds() redlock.ClockBounds { return l.c.ClockBounds() }
func (l redlockLocker) Groups() *GroupsHealth            { return nil }

func (l redlockLocker) Counters() HealthCounters {
	return HealthCounters{FenceRepairs: l.c.FenceRepairs(), Quarantines: l.c.Quarantines(),
		GrantRefusals: l.c.GrantRefusals(), ContendedRetries: l.c.ContendedRetries(), DataLosses: l.c.DataLosses()}
}
