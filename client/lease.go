package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Lease is one held lock. Its methods are safe for concurrent use.
//
// Done is closed when the lock is lost or released; from then on Err says
// why. Loss is noticed whether or not KeepAlive runs: a lease nobody
// extends is lost LossMargin before its validity ends.
type Lease struct {
	c     *Client
	key   string
	ns    string
	token string
	fence int64
	slot  *int // a semaphore permit's slot; nil for a lock
	// keys are a multi-key lock's keys (WithKeys), key the first; nil
	// for one key.
	keys []string
	// permits is the semaphore's permits (WithPermits); 0 for a lock.
	permits int

	mu         sync.Mutex
	ttl        time.Duration
	validUntil time.Time // carries a monotonic reading
	lastErr    error     // last failed extend, reported with a loss
	err        error     // set once, when done is closed
	done       chan struct{}
	timer      *time.Timer // fires at lossAt; re-armed while validity moves
	keeping    bool        // KeepAlive started
	// stopKeep cancels a running keep-alive (and its extend in flight);
	// keepExited is closed when that goroutine has returned.
	stopKeep   context.CancelFunc
	keepExited chan struct{}
}

func newLease(c *Client, key, ns, token string, fence int64, ttl time.Duration, validUntil time.Time) *Lease {
	l := &Lease{c: c, key: key, ns: ns, token: token, fence: fence, ttl: ttl, validUntil: validUntil, done: make(chan struct{})}
	l.mu.Lock()
	l.timer = time.AfterFunc(time.Until(l.lossAtLocked()), l.checkLoss)
	l.mu.Unlock()
	return l
}

// Key returns the lock's key, as given to Acquire; for a multi-key lock
// (WithKeys), its first key.
func (l *Lease) Key() string { return l.key }

// Keys returns a multi-key lock's keys, as given to WithKeys; nil for a
// lock of one key (see Key).
func (l *Lease) Keys() []string { return append([]string(nil), l.keys...) }

// target names the lease's lock in a request: its key, or its keys.
func (l *Lease) target(r *request) {
	if l.keys != nil {
		r.keys, r.hasKeys = l.keys, true
		return
	}
	r.key = l.key
}

// Slot returns the permit slot of a semaphore's lease (WithPermits), -1
// for a lock.
func (l *Lease) Slot() int {
	if l.slot == nil {
		return -1
	}
	return *l.slot
}

// Namespace returns the namespace given to Acquire ("" for none).
func (l *Lease) Namespace() string { return l.ns }

// Token returns the token that proves ownership (32 hex characters).
// Treat it as a secret: never log it whole.
func (l *Lease) Token() string { return l.token }

// Fence returns the fencing token of the acquire: strictly greater than the
// fence of any earlier lock on the same key that has ended. Pass it to the
// resource the lock protects. A Lease returned by Client.Extend carries
// the fence the daemon reports with the extend (the acquire's), or 0 when
// it reports none (fencing off, or an older daemon).
func (l *Lease) Fence() int64 { return l.fence }

// TTL returns the TTL of the last successful acquire or extend, as the
// daemon reported it (an extend never shortens: it may be above the ttl
// asked for).
func (l *Lease) TTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// ValidUntil returns the end of validity: the daemon's validity_ms counted
// from before the request that confirmed it was sent plus the daemon's
// elapsed_ms (the time it spent on the request, a wait included), so never
// later than the daemon's. It never moves earlier.
func (l *Lease) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// Done returns a channel closed when the lock is lost (an extend was
// refused, or validity is about to end without a confirmed extend) or
// released. See Err.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err returns nil while the lease is held; once Done is closed, an error
// matching ErrLost (with the cause joined: an *Error matching ErrNotHeld
// for a refused extend, or the last failed extend's error) or ErrReleased.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// LossMargin is how long before ValidUntil a lease that no extend has
// confirmed counts as lost: a tenth of its TTL, at most one second. It is
// the time left to stop work after Done is closed and before another owner
// can hold the lock.
func LossMargin(ttl time.Duration) time.Duration { return min(ttl/10, time.Second) }

func (l *Lease) lossAtLocked() time.Time { return l.validUntil.Add(-LossMargin(l.ttl)) }

// checkLoss runs when the loss timer fires: lost if no extend moved the
// validity meanwhile, else re-armed for the new loss time.
func (l *Lease) checkLoss() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	if d := time.Until(l.lossAtLocked()); d > 0 {
		l.timer.Reset(d)
		return
	}
	cause := errors.New("validity about to end without a confirmed extend")
	if l.lastErr != nil {
		cause = fmt.Errorf("%w; last extend: %w", cause, l.lastErr)
	}
	l.endLocked(errors.Join(ErrLost, cause))
}

// endLocked closes done with err, once.
func (l *Lease) endLocked(err error) {
	if l.err != nil {
		return
	}
	l.err = err
	l.timer.Stop()
	close(l.done)
	if l.stopKeep != nil {
		l.stopKeep()
	}
}

// Extend resets the lock's TTL to ttl (whole seconds, rounded up; below
// 1s is refused with ErrInvalid, as Acquire's). On
// success ValidUntil moves to the new validity (never earlier than it
// was). A refused extend (ErrNotHeld) means the lock is lost: Done is
// closed. Other errors leave the lease as it was; it is lost when its
// validity runs out unless a later extend succeeds.
//
// Errors: as Client.Extend; an error matching ErrLost or ErrReleased, with
// no request sent, once Done is closed, and also when Done was closed
// while the extend was on its way and it succeeded: the lease stays ended
// and the lock is released in the background.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if err := l.Err(); err != nil {
		return err
	}
	r := request{action: "extend", namespace: l.ns, token: l.token, ttl: ttl, slot: l.slot}
	l.target(&r)
	e, err := l.c.extend(ctx, &r)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil && l.err != nil:
		// The lease ended while the extend was on its way (the loss timer
		// fired, or Release ran): Done stays closed, and a lease once lost
		// is not held again. The extend did reach the masters, so the lock
		// stands there for ttl more with nobody to use it: release it.
		// A black-box pass saw Extend return nil on a lease whose Err was
		// ErrLost, the lock then held on for its new TTL.
		go l.releaseLeftover()
		return fmt.Errorf("%w: the extend succeeded after the lease ended; the lock is being released", l.err)
	case err == nil:
		l.lastErr = nil
		l.ttl = e.ttl
		if e.validUntil.After(l.validUntil) {
			l.validUntil = e.validUntil
		}
		return nil
	case errors.Is(err, ErrNotHeld):
		l.endLocked(errors.Join(ErrLost, err))
	default:
		l.lastErr = err
	}
	return err
}

// releaseLeftover releases the lock of a lease that ended, in the
// background (lostReleaseTimeout): what an extend that succeeded after the
// end left on the masters.
func (l *Lease) releaseLeftover() {
	ctx, cancel := context.WithTimeout(context.Background(), lostReleaseTimeout)
	defer cancel()
	_ = l.c.Release(ctx, "", l.token, WithNamespace(l.ns), l.callOption())
}

// Release stops the keep-alive, closes Done (Err then matches ErrReleased
// unless the lock was lost before) and releases the lock. It sends the
// release even after a loss, to clean up the masters that still hold the
// token. Errors: as Client.Release.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	l.endLocked(ErrReleased)
	exited := l.keepExited
	l.mu.Unlock()
	if exited != nil {
		<-exited // no extend runs after the release
	}
	return l.c.Release(ctx, "", l.token, WithNamespace(l.ns), l.callOption())
}

// callOption passes the lease's lock (key or keys) and slot, if any, to
// a call whose key argument is "".
func (l *Lease) callOption() LockOption {
	return func(r *request) {
		l.target(r)
		r.slot = l.slot
	}
}

// Status reads whether the lease's key is held (by anyone: status does
// not compare tokens); for a semaphore's lease, the semaphore's permits
// taken; for a multi-key lock, whether one token holds every key. See
// Client.Status.
func (l *Lease) Status(ctx context.Context) (Status, error) {
	return l.c.Status(ctx, "", WithNamespace(l.ns), WithPermits(l.permits), l.callOption())
}

// KeepAlive extends the lease in a goroutine at about a third of its TTL
// (sooner when less than twice that is left before the lease counts as
// lost) until ctx ends, the lease is released, or the lock is lost. A failed
// extend (503, daemon unreachable) is retried every tenth of the TTL (at
// least 100 ms); each attempt is bounded by the time the lease would count
// as lost. Only the first call starts it; Release stops it and waits for
// it, so that no extend runs after the release.
//
// Ending ctx stops the extending, not the loss signal: Done is still
// closed when validity runs out.
func (l *Lease) KeepAlive(ctx context.Context) {
	l.mu.Lock()
	start := l.err == nil && !l.keeping
	if start {
		l.keeping = true
		ctx, l.stopKeep = context.WithCancel(ctx)
		l.keepExited = make(chan struct{})
	}
	exited := l.keepExited
	l.mu.Unlock()
	if start {
		go l.keepAlive(ctx, exited)
	}
}

// nextExtend is how long the keep-alive waits before its next extend: a
// third of the TTL, or half the time left before the lease counts as lost
// when that is sooner (a lease whose validity is already short, say one
// acquired at the end of a long wait, is extended before it can lapse).
func (l *Lease) nextExtend() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(min(l.ttl/3, time.Until(l.lossAtLocked())/2), 0)
}

func (l *Lease) keepAlive(ctx context.Context, exited chan struct{}) {
	defer close(exited)
	next := time.NewTimer(l.nextExtend())
	defer next.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.done:
			return
		case <-next.C:
		}
		l.mu.Lock()
		ttl, lossAt := l.ttl, l.lossAtLocked()
		l.mu.Unlock()
		ectx, cancel := context.WithDeadline(ctx, lossAt)
		err := l.Extend(ectx, ttl)
		cancel()
		switch {
		case err == nil:
			next.Reset(l.nextExtend())
		case l.Err() != nil || ctx.Err() != nil:
			return
		default:
			next.Reset(max(ttl/10, 100*time.Millisecond))
		}
	}
}

// lostReleaseTimeout bounds WithLock's release of a lock already lost.
const lostReleaseTimeout = 2 * time.Second

// WithLock acquires key for ttl, keeps it alive, and runs fn with a
// context that is cancelled (cause: Lease.Err) the moment the lock is
// lost. It releases the lock when fn returns, errs or panics (a panic is
// re-raised after the release). The release runs on a context detached
// from ctx, bounded by the client's request timeout (WithRequestTimeout,
// default DefaultRequestTimeout) and by the lock's validity left, but at
// least 2 s (2 s for a lock already lost: that release only cleans up).
//
// It returns the acquire's error (fn not run), else fn's error (joined
// with the loss, matching ErrLost, when the lock was lost and fn returned
// its context's cancellation); when fn returned nil, the loss (matching
// ErrLost) if the lock was lost while fn ran, else the release's error.
func (c *Client) WithLock(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context, l *Lease) error, opts ...LockOption) (err error) {
	l, err := c.Acquire(ctx, key, ttl, opts...)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancelCause(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-l.Done():
			cancel(l.Err())
		case <-wctx.Done():
		}
	}()
	l.KeepAlive(wctx)
	defer func() {
		lost := l.Err() // before Release sets ErrReleased
		timeout := DefaultRequestTimeout
		if left := time.Until(l.ValidUntil()); left < timeout {
			// Past its validity the lock holds nothing the release must
			// give back (its key ends with its TTL): a daemon that stopped
			// answering must not hold the caller longer than that.
			timeout = max(left, lostReleaseTimeout)
		}
		if lost != nil {
			// The release only cleans up what is left of a lost lock;
			// its usual cause, a daemon that stopped answering, must not
			// hold the caller a whole request timeout.
			timeout = lostReleaseTimeout
		}
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		rerr := l.Release(rctx)
		rcancel()
		cancel(nil)
		<-watched
		switch {
		case err == nil && lost != nil:
			err = lost
		case err == nil && rerr != nil:
			err = rerr
		case lost != nil && errors.Is(err, context.Canceled) && ctx.Err() == nil:
			// fn returned its context's error, which the loss caused:
			// the loss is joined, so that errors.Is(err, ErrLost) says
			// why (a black-box pass got context.Canceled alone, with the
			// caller's context never cancelled).
			err = errors.Join(err, lost)
		}
	}()
	return fn(wctx, l)
}
