package redlock

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Every error returned by this package matches at most one
// of ErrLockHeld, ErrQuorumUnavailable and ErrNotHeld with errors.Is; a
// cancelled or expired context is reported by joining ctx.Err(), so
// errors.Is(err, context.Canceled) tells a cancelled caller from a lock that
// was taken. No call returns a "false, nil" result.
var (
	// ErrNotObtained matches every failed Acquire, whatever the cause.
	ErrNotObtained = errors.New("redlock: lock not obtained")
	// ErrLockHeld: a quorum of masters answered, and the lock belongs to
	// another owner (or votes were split between contenders).
	ErrLockHeld = errors.New("redlock: lock held by another owner")
	// ErrQuorumUnavailable: fewer than a quorum of masters answered in time,
	// so the outcome could not be decided. Retrying later may succeed.
	ErrQuorumUnavailable = errors.New("redlock: quorum of masters unavailable")
	// ErrNotHeld: Release or Extend found that the token does not hold the
	// lock on a quorum (it expired, was released, or the token is wrong).
	ErrNotHeld = errors.New("redlock: lock not held by this token")
	// ErrInvalid: an argument is out of range (empty key, TTL too small).
	ErrInvalid = errors.New("redlock: invalid argument")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("redlock: client closed")
	// ErrFenceExhausted: an acquire had a quorum of votes, but the
	// fencing counter leaves no fence up to MaxFence; it is in the
	// Failures of an OutcomeError of Kind ErrQuorumUnavailable (the lock
	// is refused: fail closed). Only a counter set by hand gets there.
	ErrFenceExhausted = errors.New("redlock: no fencing token left")
)

// MasterError is one master's failure within a fan-out: a timeout, a
// connection error, a quarantined or known-down master.
type MasterError struct {
	Index int    // position in the masters given to New
	Addr  string // host:port
	Err   error
}

func (e *MasterError) Error() string {
	return fmt.Sprintf("redlock: master %d (%s): %v", e.Index, e.Addr, e.Err)
}

// Unwrap returns the underlying cause.
func (e *MasterError) Unwrap() error { return e.Err }

// Per-master causes wrapped by MasterError.
var (
	// ErrMasterTimeout: the master did not answer within the per-master timeout.
	ErrMasterTimeout = errors.New("no answer within the per-master timeout")
	// ErrMasterDown: the master is known to be down (refused connections or
	// failed its last health probe), so it was not waited for, or its
	// answer (an acquire vote, still sent for the granted-lock check) was
	// not counted: it counts again after a health probe.
	ErrMasterDown = errors.New("master known to be down")
	// ErrMasterBusy: the master has not answered an earlier command for longer
	// than the per-master timeout (paused or partitioned), so a new command
	// queued behind it could not be answered in time and was failed at once.
	ErrMasterBusy = errors.New("master unresponsive (earlier command outstanding)")
	// ErrMasterQuarantined: the master answered, but its vote does not count:
	// it is quarantined (restart without data, clock jump or drift) or its
	// fencing counter awaits repair.
	ErrMasterQuarantined = errors.New("master quarantined: vote not counted")
)

// OutcomeError describes a fan-out that did not reach its goal: how many
// masters voted for it, how many refused, how many failed, and why each
// failed. It matches ErrLockHeld, ErrQuorumUnavailable or ErrNotHeld (see
// Kind), and ErrNotObtained when it came from Acquire.
type OutcomeError struct {
	Op      string // "acquire", "release", "extend" or "status"
	Kind    error  // ErrLockHeld, ErrQuorumUnavailable or ErrNotHeld
	Votes   int    // masters that granted the operation
	Refused int    // masters that answered no (held by another / absent)
	Quorum  int    // votes needed
	Masters int    // masters configured
	// RetryAfter is the holder's remaining time when Kind is ErrLockHeld and
	// it could be read (the quorum-th longest PTTL among refusing masters);
	// 0 when unknown.
	RetryAfter time.Duration
	// Contended is, for an acquire refused with ErrLockHeld with the
	// granted-lock check on, true when every master answered or failed
	// and none showed a granted lock (the holder's fence record,
	// granted.go): the key is held only by attempts not (yet) granted —
	// contenders that split the votes (they release their keys within a
	// round trip), a winner before its fence write-back, or the keys of
	// an attempt whose client died (they end with RetryAfter). A one-shot
	// Acquire retries such an attempt a few times first (retryContended).
	// Always false without the check (fencing off): a split vote cannot be
	// told from a holder whose other masters failed.
	Contended bool
	// Delayed counts, for acquire, the refusing masters where the key was
	// free but in its lock-delay (lockdelay.go): the last lock ended
	// without a release. RetryAfter then includes the delay.
	Delayed int
	// Absent and Foreign count, for release and extend, the masters where the
	// key was absent and where it held another token.
	Absent, Foreign int
	// Failures are the per-master errors (*MasterError), in master order.
	Failures []error
}

func (e *OutcomeError) Error() string {
	s := fmt.Sprintf("%v: %s got %d of %d votes (quorum %d)", e.Kind, e.Op, e.Votes, e.Masters, e.Quorum)
	// Only a master's error counts as a master that failed; the others
	// (no validity left, no fence left) are the outcome's own reasons.
	// A master that failed twice (its vote, then the fence write-back)
	// counts once: "7 master(s) failed" of 5 read as nonsense (a
	// black-box pass); each of its errors is still listed.
	var masters, reasons []error
	failed := map[int]bool{}
	for _, f := range e.Failures {
		if me, ok := errors.AsType[*MasterError](f); ok {
			masters = append(masters, f)
			failed[me.Index] = true
		} else {
			reasons = append(reasons, f)
		}
	}
	if n := len(failed); n > 0 {
		s += fmt.Sprintf(", %d master(s) failed: %v", n, errors.Join(masters...))
	}
	for _, r := range reasons {
		s += "; " + r.Error()
	}
	return s
}

// Is reports whether target is e.Kind, or ErrNotObtained for a failed acquire.
func (e *OutcomeError) Is(target error) bool {
	return target == e.Kind || (target == ErrNotObtained && e.Op == "acquire")
}

// Unwrap returns the per-master failures so errors.As finds a *MasterError.
func (e *OutcomeError) Unwrap() []error { return e.Failures }

// TTLError is the error of Acquire and Extend for a TTL that leaves no
// validity after the drift allowance (drift factor × TTL + 2 ms + the clock
// allowance, see clock.go): Redlock step 3 would grant nothing. It
// matches ErrInvalid. Min is the smallest TTL that leaves any validity
// with the allowance as it is now (the clock allowance moves with the age
// of the masters' clock readings).
type TTLError struct {
	TTL, Allowance, Min time.Duration
}

func (e *TTLError) Error() string {
	return fmt.Sprintf("%v: ttl %v leaves no validity after the drift allowance %v; the smallest ttl that leaves any is now %v",
		ErrInvalid, e.TTL, e.Allowance, e.Min)
}

func (e *TTLError) Unwrap() error { return ErrInvalid }

// ttlError is the TTLError for ttl, or nil when ttl leaves validity.
func (c *Client) ttlError(ttl time.Duration) error {
	drift := c.drift(ttl)
	if drift < ttl {
		return nil
	}
	f := c.budgetDrift()
	fixed := drift - time.Duration(float64(ttl)*f) // 2 ms + the clock allowance
	return &TTLError{TTL: ttl, Allowance: drift, Min: time.Duration(float64(fixed)/(1-f)) + time.Millisecond}
}

// notObtained makes err, an Acquire's (AcquireMulti's, AcquirePermit's)
// failure, match ErrNotObtained as every failed acquire does, keeping its
// text and what it wraps: a bad argument's error matched ErrInvalid only
// (a black-box pass, against "every failure matches ErrNotObtained").
func notObtained(err error) error {
	if err == nil || errors.Is(err, ErrNotObtained) {
		return err
	}
	return acquireFailed{err}
}

// acquireFailed is an acquire's error that matches ErrNotObtained besides
// what err matches.
type acquireFailed struct{ err error }

func (e acquireFailed) Error() string        { return e.err.Error() }
func (e acquireFailed) Unwrap() error        { return e.err }
func (e acquireFailed) Is(target error) bool { return target == ErrNotObtained }
