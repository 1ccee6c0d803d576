package idempotency

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// Outcome is Begin's answer.
type Outcome uint8

const (
	// Started: no attempt ran before; execute, passing Fence to the store.
	Started Outcome = iota + 1
	// ExpiredInProgress: an earlier attempt began and its lease ended
	// without complete: it may have done its work. Reconcile with the
	// store (find the work by its unique key) and Complete, or re-run the
	// work, passing the new Fence; PreviousFence lets the store refuse the
	// earlier attempt's late write.
	ExpiredInProgress
	// InProgress: another attempt holds the lease; retry after RetryAfter.
	InProgress
	// Completed: an attempt completed; Record.Answer is its stored answer.
	Completed
	// Mismatch: the record was begun with another fingerprint; nothing runs.
	Mismatch
)

var outcomeNames = [...]string{"", "started", "expired_in_progress", "in_progress", "completed", "fingerprint_mismatch"}

func (o Outcome) String() string { return outcomeNames[o] }

// BeginRequest is what Begin asks for.
type BeginRequest struct {
	// Key is the record's key, made injective by the caller; "<Key>:lease"
	// and "<Key>:rec" are the Redis keys used.
	Key string
	// Fingerprint is the lowercase hex SHA-256 of the request (see
	// Fingerprint for the canonical forms): 64 characters.
	Fingerprint string
	// Lease is the processing lease: the lock's TTL, within the Client's
	// max TTL.
	Lease time.Duration
	// Retention is how long the record is kept: MinRetention to the
	// Store's max retention, and at least twice Lease.
	Retention time.Duration
	// Budget, when its Set is set, counts the record's bytes on every
	// master it is kept on against a budget shared by every record
	// begun with the same Set (an account's), and with MaxBytes above 0
	// refuses a new record that would take them past it.
	Budget Budget
}

// Budget bounds the bytes a set of records (an account's) takes on each
// master: the copy's fields and key (about 256 bytes plus twice the key)
// and its answer once completed. Set is the Redis key of the budget's
// sorted set (with Set+":sz" beside it); it must be a key that no record,
// lease or lock uses. A Begin of a record that a master does not hold yet
// is refused there when the budget's bytes plus the new copy's would pass
// MaxBytes (0: counted only), and Begin returns a *BudgetError when too
// many masters refused for a quorum to keep it. A Complete is never
// refused (its attempt was admitted): its answer is counted, which may take
// the budget past MaxBytes by the answers in flight. Copies count until
// they end (Abort, or their retention); those a master fills in at
// Complete, having missed the begin, are not counted there.
type Budget struct {
	Set      string
	MaxBytes int64
}

// BeginResult is Begin's answer.
type BeginResult struct {
	Outcome Outcome
	// Token and Fence: the new attempt's (Started, ExpiredInProgress).
	// Token is a secret: pass it to Complete, Abort and Extend.
	Token string
	Fence int64
	// ValidUntil is the end of the lease's validity (monotonic reading).
	ValidUntil time.Time
	// Attempts counts the attempts begun, this one included.
	Attempts int64
	// PreviousFence is the earlier attempt's fence (ExpiredInProgress).
	PreviousFence int64
	// RetryAfter is the lease holder's remaining time (InProgress), 0
	// when unknown.
	RetryAfter time.Duration
	// Record is the record that decided a Completed, Mismatch or
	// InProgress answer (zero when none was read).
	Record Record
}

var hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (s *Store) checkBegin(b *BeginRequest) error {
	switch {
	case b.Key == "":
		return fmt.Errorf("%w: key must not be empty", ErrInvalid)
	case !hexSHA256.MatchString(b.Fingerprint):
		return fmt.Errorf("%w: fingerprint: must be 64 lowercase hex characters (a SHA-256)", ErrInvalid)
	case b.Retention < MinRetention || b.Retention > s.maxRetention:
		return fmt.Errorf("%w: retention: %v is outside %v to %v", ErrInvalid, b.Retention, MinRetention, s.maxRetention)
	case b.Budget.MaxBytes < 0:
		return fmt.Errorf("%w: budget: %d bytes is below 0 (0: no cap)", ErrInvalid, b.Budget.MaxBytes)
	case b.Budget.MaxBytes > 0 && b.Budget.Set == "":
		return fmt.Errorf("%w: budget: a cap of %d bytes needs a set to count in", ErrInvalid, b.Budget.MaxBytes)
	case b.Retention < 2*b.Lease:
		// The record must outlive the lease by a lease at least: a retry
		// after the lease then finds the attempt's copy and answers
		// ExpiredInProgress, not a blind Started (safety.go, 3).
		return fmt.Errorf("%w: retention: %v must be at least twice the lease (%v), so that a retry after the lease still sees the attempt", ErrInvalid, b.Retention, b.Lease)
	}
	return nil
}

// Begin starts an attempt of b.Key, or says why not (Outcome). It costs one
// quorum read when the record is COMPLETED, and a read, an acquire and a
// write otherwise. Errors: ErrInvalid (bad arguments, the message naming
// the field and its limit, including the lease against the Client's max
// TTL), or one matching redlock.ErrQuorumUnavailable; ctx's error is
// joined in when it ended. No record or lease is left behind by a Begin
// that answers an error.
func (s *Store) Begin(ctx context.Context, b BeginRequest) (BeginResult, error) {
	if err := s.checkBegin(&b); err != nil {
		return BeginResult{}, err
	}
	cp, err := s.read(ctx, b.Key)
	if err != nil {
		return BeginResult{}, err
	}
	if res, done := decided(&cp, b.Fingerprint); done {
		return res, nil
	}
	lease, err := s.c.Acquire(ctx, leaseKey(b.Key), b.Lease)
	if err != nil {
		var oe *redlock.OutcomeError
		if errors.Is(err, redlock.ErrLockHeld) && errors.As(err, &oe) {
			res := BeginResult{Outcome: InProgress, RetryAfter: oe.RetryAfter}
			if w := cp.winner(); w != nil {
				res.Record, res.Attempts = *w, w.Attempts
			}
			return res, nil
		}
		if errors.Is(err, redlock.ErrInvalid) {
			return BeginResult{}, fmt.Errorf("%w: lease: %w", ErrInvalid, err)
		}
		return BeginResult{}, err
	}
	if lease.Fence() <= 0 {
		// Copies are ordered by fence: without fencing every attempt
		// would have fence 0 and no take-over could replace a copy.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = lease.Release(rctx)
		return BeginResult{}, fmt.Errorf("%w: the redlock.Client has no fencing (WithFenceKey): idempotency records need it", ErrInvalid)
	}
	res, err := s.writeBegin(ctx, &b, lease, &cp)
	if err != nil || (res.Outcome != Started && res.Outcome != ExpiredInProgress) {
		// Nothing runs: the lease goes back at once, on a context of its
		// own so that a cancelled request leaves no lease behind.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = lease.Release(rctx)
	}
	return res, err
}

// decided answers a Begin from the record read before the lease: a
// COMPLETED copy replays, another fingerprint is refused.
func decided(cp *copies, fingerprint string) (BeginResult, bool) {
	w := cp.winner()
	switch {
	case w == nil:
		return BeginResult{}, false
	case w.Fingerprint != fingerprint:
		return BeginResult{Outcome: Mismatch, Record: *w, Attempts: w.Attempts}, true
	case w.State == StateCompleted:
		return BeginResult{Outcome: Completed, Record: *w, Attempts: w.Attempts}, true
	}
	return BeginResult{}, false
}

// writeBegin writes the IN_PROGRESS copy of the attempt holding lease to
// every master, and decides once every master answered or failed
// (safety.go, 4): Started or ExpiredInProgress with a quorum of counting
// masters written and none showing a COMPLETED copy or another
// fingerprint. On any other answer the copies written are deleted again.
// It does not decide at the quorum-th write: a late Complete of the
// attempt it takes over may have reached another master first, and that
// COMPLETED copy must refuse it (a break-it pass saw one key replay two
// answers when it did).
func (s *Store) writeBegin(ctx context.Context, b *BeginRequest, lease *redlock.Lock, read *copies) (BeginResult, error) {
	attempts := int64(1)
	if read.inProgress != nil {
		attempts = read.inProgress.Attempts + 1
	}
	args := []any{"begin", lease.Token(), strconv.FormatInt(lease.Fence(), 10), b.Fingerprint,
		strconv.FormatInt(attempts, 10), strconv.FormatInt(time.Now().UnixMilli(), 10), "", ms(b.Retention), ms(b.Lease), "0",
		b.Budget.Set, strconv.FormatInt(b.Budget.MaxBytes, 10)}
	var prior copies // the copies the writes replaced or were refused by
	written := 0
	var failures []error
	var refused *Record // a counting copy that refused: COMPLETED or another fingerprint
	full := 0           // masters whose budget refused the new copy
	var fullFor time.Duration
	err := s.c.RunQuorumScript(ctx, writeScript, recordKey(b.Key), args, func(a redlock.MasterAnswer) bool {
		if !s.counts(a) {
			failures = append(failures, s.notCounted(a))
			return false
		}
		var p Record
		hasPrior := false
		if a.Extra != "" {
			p, hasPrior = parseCopy(a.Extra, 0)
		}
		if hasPrior {
			prior.add(p)
		}
		switch a.Code {
		case 1:
			written++
			attempts = max(attempts, a.Value)
		case 2, 3:
			if hasPrior {
				refused = &p
				return true
			}
		case 6:
			wait := time.Duration(a.Value) * time.Millisecond
			if full == 0 || wait < fullFor {
				fullFor = wait
			}
			full++
			failures = append(failures, fmt.Errorf("master %d: the budget is full", a.Index))
		default:
			failures = append(failures, fmt.Errorf("master %d: refused the begin write (code %d)", a.Index, a.Code))
		}
		return false // every master is heard (or fails): see above
	})
	if err == nil && refused == nil && written < s.c.Quorum() {
		err = s.quorumError("begin", written, failures)
		if full > 0 && written+full >= s.c.Quorum() {
			// The budget, not the masters, kept a quorum from writing.
			err = &BudgetError{MaxBytes: b.Budget.MaxBytes, RetryAfter: fullFor}
		}
	}
	if err != nil || refused != nil {
		s.undo(ctx, b.Key, lease)
	}
	if err != nil {
		return BeginResult{}, err
	}
	if refused != nil {
		o := Completed
		if refused.Fingerprint != b.Fingerprint {
			o = Mismatch
		}
		return BeginResult{Outcome: o, Record: *refused, Attempts: refused.Attempts}, nil
	}
	res := BeginResult{Outcome: Started, Token: lease.Token(), Fence: lease.Fence(), ValidUntil: lease.ValidUntil(), Attempts: attempts}
	prev := read.inProgress
	if prior.inProgress != nil && (prev == nil || prior.inProgress.Fence > prev.Fence) {
		prev = prior.inProgress
	}
	if prev != nil {
		res.Outcome, res.PreviousFence = ExpiredInProgress, prev.Fence
	}
	return res, nil
}

// undo puts back, on every master, the copy a refused or failed begin
// replaced (or deletes its copy where there was none), on a context of its
// own bounded by a second.
func (s *Store) undo(ctx context.Context, key string, lease *redlock.Lock) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	args := []any{"undo", lease.Token(), strconv.FormatInt(lease.Fence(), 10), "", "0", "0", "", "0", "0", "0"}
	_ = s.c.RunQuorumScript(uctx, writeScript, recordKey(key), args, func(redlock.MasterAnswer) bool { return false })
}
