// Package client is the Go client of the redlockd HTTP action API
// (POST /v1/lock). It uses the standard library only.
//
//	c, err := client.New("http://127.0.0.1:7070", apiKey)
//	err = c.WithLock(ctx, "job:daily_report", time.Minute,
//		func(ctx context.Context, l *client.Lease) error {
//			return work(ctx, l.Fence()) // ctx is cancelled if the lock is lost
//		})
//
// A Lease is one held lock. KeepAlive extends it in the background at
// about a third of its TTL; Done is closed the moment the lock is lost (an
// extend was refused, or its validity is about to end without a confirmed
// extend), and Err says why.
//
// # What is guaranteed
//
// ValidUntil is never later than the daemon's validity: it counts from
// before the request was sent. Done is closed no later than LossMargin
// before ValidUntil when no extend confirmed a new validity by then,
// provided this process is not paused (GC, swap, SIGSTOP) for longer than
// that margin. Every lease comes with a fencing token (Fence), strictly
// greater than that of any earlier lock on the same key that has ended.
//
// # What is NOT guaranteed
//
// A lock is a lease, not a mutex. A process paused past its validity, or
// a network delay longer than the TTL, can let a second holder in before
// Done is observed; work that must never overlap must pass Fence to the
// resource, which refuses any fence lower than the highest it has seen.
// See docs/safety.md.
//
// # Errors
//
// Every error from the API is an *Error matching one of ErrLockHeld,
// ErrNotHeld, ErrUnavailable, ErrUnauthorized or ErrInvalid with errors.Is
// (or none of them for an unexpected answer such as a 500). A cancelled or
// expired context of the caller is joined in, so errors.Is(err,
// context.Canceled) works; the client's own request timeout and a stopped
// wait (WithStopWaiting) are not the caller's context, and match neither
// context.Canceled nor context.DeadlineExceeded. Transport failures
// (connection refused, reset, the request timeout) match ErrUnavailable.
package client
