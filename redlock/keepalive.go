package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Errors reported by Lock.Err.
var (
	// ErrLost matches Lock.Err once the lock is lost: an extend was refused
	// (ErrNotHeld is joined), or its validity came within LossMargin of its
	// end without a confirmed extend (the last extend's error is joined).
	ErrLost = errors.New("redlock: lock lost")
	// ErrReleased matches Lock.Err after Lock.Release.
	ErrReleased = errors.New("redlock: lock released")
)

// LossMargin is how long before the end of validity a lock that no extend
// has confirmed counts as lost: a tenth of its TTL, at most one second. It
// is the time the holder has to stop its work after Done is closed, before
// another owner can be granted the lock.
func LossMargin(ttl time.Duration) time.Duration { return min(ttl/10, time.Second) }

// keepAlive is a Lock's loss signal and keep-alive state. The zero value
// is ready: the channel and the loss timer are made on first use.
type keepAlive struct {
	mu      sync.Mutex
	done    chan struct{} // nil until Done or KeepAlive is called
	err     error         // set once, when the lock ended
	lastErr error         // last failed keep-alive extend
	timer   *time.Timer   // fires at the loss time; re-armed while validity moves
	started bool          // KeepAlive was called
	// releasing: Release was called (its keys are gone, or going, from
	// the masters: Validity is 0 from then on, even after a loss).
	releasing bool
	// stop cancels a running keep-alive (and its extend in flight);
	// exited is closed when that goroutine has returned.
	stop   context.CancelFunc
	exited chan struct{}
}

func (l *Lock) lossAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil.Add(-LossMargin(l.ttl))
}

// Done returns a channel that is closed when the lock is lost — an extend
// by KeepAlive was refused, or the validity is within LossMargin of its end
// with no extend confirming a new one — or released by Lock.Release. Err
// then says which. Loss is watched from the first call of Done or
// KeepAlive on, with a timer (no goroutine).
//
// As in etcd's Session.Done and Consul's lock channel, Done is a signal to
// stop work, not a guarantee: a process paused past its validity sees it
// late. Pass Fence to the resource.
func (l *Lock) Done() <-chan struct{} {
	k := &l.keep
	k.mu.Lock()
	defer k.mu.Unlock()
	l.watchLocked()
	return k.done
}

// watchLocked makes the channel and arms the loss timer; k.mu is held.
func (l *Lock) watchLocked() {
	k := &l.keep
	if k.done != nil {
		return
	}
	k.done = make(chan struct{})
	if k.err != nil {
		close(k.done)
		return
	}
	k.timer = time.AfterFunc(time.Until(l.lossAt()), l.checkLoss)
}

// Err returns nil while the lock is held; after Done is closed, an error
// matching ErrLost (with the cause joined) or ErrReleased. It also reports
// a loss by time when nothing watched the lock.
func (l *Lock) Err() error {
	k := &l.keep
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err == nil && !time.Now().Before(l.lossAt()) {
		l.lostLocked()
	}
	return k.err
}

// checkLoss runs when the loss timer fires.
func (l *Lock) checkLoss() {
	k := &l.keep
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err != nil {
		return
	}
	if d := time.Until(l.lossAt()); d > 0 {
		k.timer.Reset(d) // an extend moved the validity
		return
	}
	l.lostLocked()
}

// lostLocked ends the lock as lost by time; k.mu is held.
func (l *Lock) lostLocked() {
	cause := errors.New("validity about to end without a confirmed extend")
	if l.keep.lastErr != nil {
		cause = fmt.Errorf("%w; last extend: %w", cause, l.keep.lastErr)
	}
	l.keep.endLocked(errors.Join(ErrLost, cause))
}

// endLocked records err and closes done, once; k.mu is held.
func (k *keepAlive) endLocked(err error) {
	if k.err != nil {
		return
	}
	k.err = err
	if k.timer != nil {
		k.timer.Stop()
	}
	if k.done != nil {
		close(k.done)
	}
	if k.stop != nil {
		k.stop()
	}
}

// released ends the loss signal before a release, and waits until the
// keep-alive, if any, has stopped: no extend runs after the release.
func (l *Lock) released() {
	l.keep.mu.Lock()
	l.keep.releasing = true
	l.keep.endLocked(ErrReleased)
	exited := l.keep.exited
	l.keep.mu.Unlock()
	if exited != nil {
		<-exited
	}
}

// KeepAlive extends the lock in a goroutine, to its current TTL, at about
// a third of that TTL, until ctx ends, the lock is released, or it is lost.
// A failed extend (no quorum) is retried every tenth of the TTL (at least
// 10 ms); each attempt is bounded by the loss time. A refused extend
// (ErrNotHeld) ends the lock as lost at once. Only the first call starts
// it; Release stops it and waits for it, so that no extend runs after the
// release.
//
// Ending ctx stops the extending, not the loss signal: Done is still
// closed when the validity runs out. So does closing the Client: the
// keep-alive's goroutine returns at once, and Err then joins ErrClosed.
func (l *Lock) KeepAlive(ctx context.Context) {
	k := &l.keep
	k.mu.Lock()
	l.watchLocked()
	start := k.err == nil && !k.started
	if start {
		k.started = true
		ctx, k.stop = context.WithCancel(ctx)
		k.exited = make(chan struct{})
	}
	done, exited := k.done, k.exited
	k.mu.Unlock()
	if start {
		go l.keepAlive(ctx, done, exited)
	}
}

// extendSlack is how long before the loss time a keep-alive's extend
// stops waiting: a tenth of the TTL, 1 to 50 ms.
func extendSlack(ttl time.Duration) time.Duration {
	return min(max(ttl/10, time.Millisecond), 50*time.Millisecond)
}

// nextExtend is how long the keep-alive waits before its next extend: a
// third of the TTL, or half the time left before the lock counts as lost
// when that is sooner (KeepAlive called late, or a validity cut short by a
// slow vote, is not left to lapse before the first extend).
func (l *Lock) nextExtend() time.Duration {
	return max(min(l.TTL()/3, time.Until(l.lossAt())/2), 0)
}

// closedUnderKeepAlive records that the Client was closed under a running
// keep-alive, which then stops: nothing can extend the lock any more. Done
// is still closed by the loss timer when the validity runs out, and Err
// then says the Client was closed.
func (l *Lock) closedUnderKeepAlive() {
	l.keep.mu.Lock()
	l.keep.lastErr = ErrClosed
	l.keep.mu.Unlock()
}

func (l *Lock) keepAlive(ctx context.Context, done <-chan struct{}, exited chan struct{}) {
	defer close(exited)
	next := time.NewTimer(l.nextExtend())
	defer next.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-l.c.closed:
			l.closedUnderKeepAlive()
			return
		case <-next.C:
		}
		ttl := l.TTL()
		// The extend ends a little before the loss timer fires: Extend
		// waits for every master, and one that answers late (or not)
		// must not let the loss timer win against an extend a quorum
		// already made (Extend succeeds when its ctx ends after that).
		ectx, cancel := context.WithDeadline(ctx, l.lossAt().Add(-extendSlack(ttl)))
		err := l.Extend(ectx, ttl)
		cancel()
		switch {
		case err == nil:
			l.keep.mu.Lock()
			l.keep.lastErr = nil
			l.keep.mu.Unlock()
			next.Reset(l.nextExtend())
		case errors.Is(err, ErrNotHeld):
			l.keep.mu.Lock()
			l.keep.endLocked(errors.Join(ErrLost, err))
			l.keep.mu.Unlock()
			return
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrClosed):
			l.closedUnderKeepAlive()
			return
		default:
			l.keep.mu.Lock()
			l.keep.lastErr = err
			l.keep.mu.Unlock()
			next.Reset(max(ttl/10, 10*time.Millisecond))
		}
	}
}
