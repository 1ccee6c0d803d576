package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// Complete stores answer as the record's answer, on every master, and then
// releases the lease. It answers nil once a quorum of counting masters
// holds the COMPLETED copy: every later Begin replays answer (safety.go).
// A copy is written where the token's IN_PROGRESS copy is, and where there
// is none (a master that missed the begin) from the fields of a copy that
// is; it is refused where a later attempt's copy is.
//
// It is accepted after the lease ended, as long as no later attempt began:
// the work ran and its answer is the truth. Errors: ErrInvalid,
// ErrAnswerTooLarge, ErrNotOwner (a later attempt began, or completed, or
// the record is gone), ErrAlreadyCompleted (this attempt completed with
// another answer: the first is kept; the same answer again is nil, a
// retry), or one matching redlock.ErrQuorumUnavailable.
func (s *Store) Complete(ctx context.Context, key, token string, answer *Answer) error {
	if key == "" || token == "" {
		return fmt.Errorf("%w: key and token must not be empty", ErrInvalid)
	}
	text, err := s.encodeAnswer(answer)
	if err != nil {
		return err
	}
	enc := encodedAnswer{text: text, size: answer.Size(), status: answer.Status}
	unlock, err := s.lockCompletes(ctx, key)
	if err != nil {
		return err
	}
	defer unlock()
	// Under the lock, no other Complete of the record is between this
	// read and the writes below: one that stored an answer on a quorum is
	// met here, and this one writes nothing.
	cp, err := s.read(ctx, key)
	if err != nil {
		return err
	}
	if c := cp.completed; c != nil && c.token == token {
		if again, err := s.encodeAnswer(c.Answer); err != nil || again != text {
			return ErrAlreadyCompleted // its text says the first answer is kept
		}
	}
	// Round one: where the token's copy is. Round two, only when too few
	// had one: fill in the masters that had none, from a copy of round one.
	var own *Record
	written, absent, err := s.completeRound(ctx, key, token, enc, nil, &own)
	if err == nil && written < s.c.Quorum() && absent > 0 && own != nil {
		// Round two answers nil only with the answer on a quorum.
		_, _, err = s.completeRound(ctx, key, token, enc, own, &own)
	}
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_, _ = s.c.Release(rctx, leaseKey(key), token)
	return nil
}

// completeLockTTL is the TTL of a record's complete lock (lockCompletes):
// longer than a Complete's read and two write rounds, each bounded by the
// per-master timeout; a Complete that waits for the lock waits at most
// this and a second more (the lock of a daemon that died while completing
// runs out within it).
const completeLockTTL = 5 * time.Second

// lockCompletes takes the record's complete lock, "<key>:complete", a
// Redlock lock, waiting for it within ctx and completeLockTTL, and returns
// its release. Completes of one record run one at a time, so that every
// master sees them in one order: two Completes of one attempt with
// different answers, sent at once through two daemons, reached the masters
// in different orders, each master kept the first it got, and reads then
// replayed either answer, and both callers could be told 409 (a black-box
// pass: 29 of 150 keys replayed two answers, every master up). Errors: the
// lock's (one matching redlock.ErrQuorumUnavailable; redlock.ErrLockHeld
// when another Complete held it throughout the wait).
func (s *Store) lockCompletes(ctx context.Context, key string) (unlock func(), err error) {
	// The wait outlasts the TTL: a lock left by a daemon that died while
	// completing has run out before the wait ends.
	l, err := s.c.Acquire(ctx, key+":complete", completeLockTTL, redlock.WithWait(completeLockTTL+time.Second))
	if err != nil {
		return nil, fmt.Errorf("the record's complete lock: %w", err)
	}
	return func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = l.Release(rctx)
	}, nil
}

// encodedAnswer is an answer as complete stores it: its JSON, and the
// size and status a listing reads without it (list_read.lua).
type encodedAnswer struct {
	text         string
	size, status int
}

// completeRound sends one round of complete writes; with fill, masters
// without a copy get one made from fill's fields. own receives the token's
// copy when one is seen.
func (s *Store) completeRound(ctx context.Context, key, token string, enc encodedAnswer, fill *Record, own **Record) (written, absent int, err error) {
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	size, status := strconv.Itoa(enc.size), strconv.Itoa(enc.status)
	args := []any{"complete", token, "-1", "", "0", "0", enc.text, "0", "0", now, size, status}
	if fill != nil {
		args = []any{"complete", token, strconv.FormatInt(fill.Fence, 10), fill.Fingerprint,
			strconv.FormatInt(fill.Attempts, 10), strconv.FormatInt(fill.StartedAt.UnixMilli(), 10), enc.text,
			ms(max(fill.retention, fill.TTL, MinRetention)), "0", now, size, status}
	}
	var failures []error
	var others []Record // other attempts' copies that refused
	counted, again := 0, false
	err = s.c.RunQuorumScript(ctx, writeScript, recordKey(key), args, func(a redlock.MasterAnswer) bool {
		if !s.counts(a) {
			failures = append(failures, s.notCounted(a))
			return false
		}
		counted++
		p, ok := parseCopy(a.Extra, a.Value)
		if ok && p.token == token {
			*own = &p
		}
		switch a.Code {
		case 1:
			written++
		case 4:
			absent++
		case 5:
			again = true
			return true
		default:
			if ok {
				others = append(others, p)
			}
		}
		return written >= s.c.Quorum()
	})
	if again {
		return written, absent, ErrAlreadyCompleted
	}
	if err != nil {
		return written, absent, err
	}
	if written >= s.c.Quorum() {
		return written, absent, nil
	}
	// Another attempt's copy refuses the token for good when it is a later
	// attempt's or a COMPLETED one; an older attempt's IN_PROGRESS copy is
	// on a master that missed this attempt's begin, and is filled in.
	for _, o := range others {
		if o.State == StateCompleted || *own == nil || o.Fence > (*own).Fence {
			return written, absent, fmt.Errorf("%w: a later attempt began or completed", ErrNotOwner)
		}
		absent++
	}
	switch {
	case fill == nil && absent > 0 && *own != nil:
		return written, absent, nil // round two follows
	case counted >= s.c.Quorum():
		return written, absent, fmt.Errorf("%w: no IN_PROGRESS copy of this token on a quorum (aborted, past its retention, or never begun)", ErrNotOwner)
	}
	return written, absent, s.quorumError("complete", written, failures)
}

// Abort deletes the attempt's IN_PROGRESS copies and releases the lease,
// so that the next Begin answers Started: for a failure that may be
// retried, after which no work is left behind. An attempt that took over
// an earlier one (ExpiredInProgress) puts the earlier attempt's copy back
// instead: that attempt may have done its work, so the next Begin answers
// ExpiredInProgress again, not Started. A failure that must not be
// retried is stored with Complete, its answer carrying the failure (as a
// 4xx), so that retries replay it. Errors: ErrInvalid, ErrNotOwner (a
// later attempt's copy, or a COMPLETED one, is on a counting master, or
// no counting master of a quorum had the token's copy), or
// one matching redlock.ErrQuorumUnavailable.
func (s *Store) Abort(ctx context.Context, key, token string) error {
	if key == "" || token == "" {
		return fmt.Errorf("%w: key and token must not be empty", ErrInvalid)
	}
	args := []any{"abort", token, "-1", "", "0", "0", "", "0", "0", "0"}
	var failures []error
	done, deleted, notOwner := 0, 0, false
	err := s.c.RunQuorumScript(ctx, writeScript, recordKey(key), args, func(a redlock.MasterAnswer) bool {
		if !s.counts(a) {
			failures = append(failures, s.notCounted(a))
			return false
		}
		switch a.Code {
		case 1:
			done++
			deleted++
		case 4:
			done++
		default:
			notOwner = true
			return true
		}
		return false // every master: an abort deletes every copy it can
	})
	switch {
	case err != nil:
		return err
	case notOwner:
		return fmt.Errorf("%w: a later attempt began or completed", ErrNotOwner)
	case done < s.c.Quorum():
		return s.quorumError("abort", done, failures)
	case deleted == 0:
		// A quorum of counting masters has no copy of this token: nothing
		// was aborted (never begun, aborted already, or past retention).
		return fmt.Errorf("%w: no copy of this token on a quorum of masters (never begun, aborted already, or past its retention)", ErrNotOwner)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_, _ = s.c.Release(rctx, leaseKey(key), token)
	return nil
}

// Extend makes the processing lease last lease more (redlock
// Client.Extend on the lease) and returns the new end of its validity.
// Before the lease, it keeps the attempt's IN_PROGRESS record at least
// 2×lease more on a quorum of counting masters (keepRecord), so the record
// always outlives the lease by a lease, as Begin's retention rule asks.
// Errors: ErrInvalid when 2×lease is over the max retention (naming lease
// and retention), ErrNotOwner when the token no longer holds the lease or
// its record, else the lock's (redlock.ErrQuorumUnavailable,
// redlock.ErrInvalid) or a QuorumError of the record write; on an error
// of the record write the lease is not extended.
func (s *Store) Extend(ctx context.Context, key, token string, lease time.Duration) (time.Time, error) {
	switch {
	case key == "" || token == "":
		return time.Time{}, fmt.Errorf("%w: key and token must not be empty", ErrInvalid)
	case lease <= 0:
		return time.Time{}, fmt.Errorf("%w: lease: %v must be positive", ErrInvalid, lease)
	case 2*lease > s.maxRetention:
		return time.Time{}, fmt.Errorf("%w: lease: %v: the record is kept twice the lease from now, and that is over the max retention (%v): the lease can be at most %v",
			ErrInvalid, lease, s.maxRetention, s.maxRetention/2)
	}
	if err := s.keepRecord(ctx, key, token, lease); err != nil {
		return time.Time{}, err
	}
	l, err := s.c.Extend(ctx, leaseKey(key), token, lease)
	switch {
	case errors.Is(err, redlock.ErrNotHeld):
		return time.Time{}, fmt.Errorf("%w: the lease ended: %w", ErrNotOwner, err)
	case err != nil:
		return time.Time{}, err
	}
	return l.ValidUntil(), nil
}

// keepRecord raises the TTL of the attempt's IN_PROGRESS copy to at least
// 2×lease on every master that has it, and needs a quorum of counting
// masters to have done so.
//
// Why the record always outlives an extended lease (safety.go, 3): Begin
// writes the copy with a retention of at least twice the lease. An extend
// first raises the copy's TTL to at least twice the new lease, from its
// write, on a quorum Q1 of counting masters, and only then extends the
// lease, which ends at most lease after the extend reached each master
// (the lock's extend script); so each copy in Q1 lasts beyond the lease's
// end by a lease less the time between the two writes (bounded by the
// Client's per-master timeout, far below any lease), the margin Begin
// gives. A later Begin's
// write hears a quorum Q2; a master in Q1 ∩ Q2 still has the copy and the
// Begin answers ExpiredInProgress, never a blind Started. If the record
// write fails the lease is not extended, so it ends within the TTL the
// copies had; a record write that succeeds before a failed lease extend
// only keeps the copy longer, which is safe. The TTL is never lowered and
// 2×lease is within the max retention (checked by Extend), so every copy
// ends within the max retention of its last write: a repaired master's
// wait (Store.counts) still covers it.
func (s *Store) keepRecord(ctx context.Context, key, token string, lease time.Duration) error {
	args := []any{"extend", token, "0", "", "0", "0", "", "0", ms(lease), "0"}
	kept, none := 0, 0
	notOwner := false
	var failures []error
	err := s.c.RunQuorumScript(ctx, writeScript, recordKey(key), args, func(a redlock.MasterAnswer) bool {
		if !s.counts(a) {
			failures = append(failures, s.notCounted(a))
			return false
		}
		switch a.Code {
		case 1:
			kept++
		case 0, 4:
			// No copy, or another attempt's: a master that missed this
			// attempt's begin may keep an earlier attempt's copy.
			none++
			failures = append(failures, fmt.Errorf("master %d: has no copy of this attempt", a.Index))
		case 2:
			notOwner = true
			return true
		default:
			failures = append(failures, fmt.Errorf("master %d: refused the extend write (code %d)", a.Index, a.Code))
		}
		return kept >= s.c.Quorum()
	})
	switch {
	case err != nil:
		return err
	case notOwner:
		return fmt.Errorf("%w: the record is completed", ErrNotOwner)
	case kept >= s.c.Quorum():
		return nil
	case none >= s.c.Quorum():
		return fmt.Errorf("%w: no copy of this token on a quorum of masters (a later attempt began, or it was aborted or is past its retention)", ErrNotOwner)
	}
	return s.quorumError("extend", kept, failures)
}
