package redlock

import (
	"math/rand/v2"
	"time"
)

// RetryStrategy says how long to wait before the next acquire attempt.
// NextBackoff returns 0 (or less) to stop retrying. A strategy is used by one Acquire
// call at a time; Acquire also stops when its wait budget or context ends.
// With WithWait, a lock held by another owner is attempted again at its
// release or TTL end rather than at the strategy's pace, and only d, the
// context or WithStopWaiting end the wait (see WithWait).
type RetryStrategy interface {
	NextBackoff() time.Duration
}

type noRetry struct{}

func (noRetry) NextBackoff() time.Duration { return 0 }

// NoRetry makes a single attempt.
func NoRetry() RetryStrategy { return noRetry{} }

type linearBackoff time.Duration

func (d linearBackoff) NextBackoff() time.Duration { return jitter(time.Duration(d)) }

// LinearBackoff waits about d (jittered to [d/2, d]) between attempts; d ≤ 0
// makes one attempt, as NoRetry.
func LinearBackoff(d time.Duration) RetryStrategy { return linearBackoff(d) }

type exponentialBackoff struct {
	next, max time.Duration
}

func (b *exponentialBackoff) NextBackoff() time.Duration {
	d := b.next
	if b.next < b.max {
		b.next = min(2*b.next, b.max)
	}
	return jitter(d)
}

// ExponentialBackoff waits min, 2·min, 4·min … up to max between attempts,
// each jittered to [d/2, d] so contenders that failed together do not retry
// together (the Redis Redlock page: "retry after a random delay").
func ExponentialBackoff(min, max time.Duration) RetryStrategy {
	if min <= 0 {
		min = time.Millisecond
	}
	if max < min {
		max = min
	}
	return &exponentialBackoff{next: min, max: max}
}

type limitRetry struct {
	s    RetryStrategy
	left int
}

func (l *limitRetry) NextBackoff() time.Duration {
	if l.left <= 0 {
		return 0
	}
	l.left--
	return l.s.NextBackoff()
}

// LimitRetry stops s after n retries (it does not shorten a WithWait wait:
// see WithWait).
func LimitRetry(s RetryStrategy, n int) RetryStrategy { return &limitRetry{s: s, left: n} }

// jitter returns a duration uniformly drawn from [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}
