package daemon

import (
	"context"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// Locker is the lock service the daemon serves: a quorum of Redis masters
// in production (NewRedlockLocker), or anything with the same behaviour in
// tests. Keys given to it are full Redis keys; errors follow the redlock
// package (*redlock.OutcomeError matching redlock.ErrLockHeld,
// ErrQuorumUnavailable or ErrNotHeld).
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
	// Masters is a health snapshot of every master, in configuration order:
	// State, Counting, quarantine, clock and warnings as redlock.MasterStatus
	// documents them. The daemon derives quorum availability from it (at
	// least Quorum masters Counting), so that /readyz and /metrics show
	// one consistent picture, and, with a failed call's outcome, the 503
	// quorum_unavailable answer's counts and when a quorum is expected
	// back.
	Masters() []redlock.MasterStatus
	// Quorum is the number of masters that must agree: N/2+1.
	Quorum() int
	// FenceRepairs is how many fencing counters of masters that lost their
	// data were repaired from a quorum since start.
	FenceRepairs() int64
	// Quarantines is how many times a master was quarantined since start.
	Quarantines() int64
	// GrantRefusals counts acquires refused over a granted lock
	// (redlock.Client.GrantRefusals).
	GrantRefusals() int64
	// DataLosses is how many times a master was found to have lost lock
	// state since start, per reason.
	DataLosses() map[redlock.DataLossReason]int64
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
}

// AcquireRequest is what the Server asks Locker.Acquire for.
type AcquireRequest struct {
	// Key is the full Redis key.
	Key string
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

// NewRedlockLocker adapts a *redlock.Client to Locker. The Client stays the
// caller's to Close, after Server.Run has returned.
func NewRedlockLocker(c *redlock.Client) Locker { return redlockLocker{c} }

type redlockLocker struct{ c *redlock.Client }

// LongestMaxTTL is redlock.Client.LongestMaxTTL (/readyz shows it).
func (l redlockLocker) LongestMaxTTL() time.Duration { return l.c.LongestMaxTTL() }

// ClockBounds is redlock.Client.ClockBounds (/readyz shows it).
func (l redlockLocker) ClockBounds() redlock.ClockBounds { return l.c.ClockBounds() }

func (l redlockLocker) Acquire(ctx context.Context, req AcquireRequest) (Lease, error) {
	var opts []redlock.AcquireOption
	if req.Wait > 0 {
		opts = []redlock.AcquireOption{redlock.WithWait(req.Wait), redlock.WithStopWaiting(req.StopWaiting)}
	}
	if req.LockDelay > 0 {
		opts = append(opts, redlock.WithLockDelay(req.LockDelay))
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
	return Lease{Token: lk.Token(), Fence: lk.Fence(), ValidUntil: lk.ValidUntil()}, nil
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

func (l redlockLocker) Masters() []redlock.MasterStatus { return l.c.Masters() }
func (l redlockLocker) Quorum() int                     { return l.c.VotesNeeded() }
func (l redlockLocker) FenceRepairs() int64             { return l.c.FenceRepairs() }
func (l redlockLocker) Quarantines() int64              { return l.c.Quarantines() }
func (l redlockLocker) GrantRefusals() int64            { return l.c.GrantRefusals() }
func (l redlockLocker) DataLosses() map[redlock.DataLossReason]int64 {
	return l.c.DataLosses()
}
