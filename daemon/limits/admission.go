package limits

import "time"

// Reason says which limit refused a call.
type Reason uint8

const (
	// QuotaExhausted: the account's calls in its quota window are used up.
	QuotaExhausted Reason = iota + 1
	// RateLimited: the account's token bucket is empty.
	RateLimited
	// TooManyLocks: the acquire would take the account past max_locks.
	TooManyLocks
	// SetAboveMaxLocks: a multi-key lock has more keys than the account's
	// max_locks: it can never be held, whatever is released (a bad
	// request, not a limit to wait for).
	SetAboveMaxLocks
)

// Refusal is why a call was refused: the limit, the message for the
// answer, and how long until a retry may pass (the answer's Retry-After).
type Refusal struct {
	Reason     Reason
	Msg        string
	RetryAfter time.Duration
}

// Call is what a call is to admission.
type Call uint8

const (
	// Ordinary is any call but a release or an extend: refused once the
	// quota or the bucket is spent.
	Ordinary Call = iota
	// Release gives a lock back and is never refused: refusing it would
	// keep the lock (and its slot under max_locks) until its TTL ends. It
	// is charged like any call while the quota and the bucket allow, and
	// free once they are spent.
	Release
	// Extend keeps a lock that is held and is never refused, as Release:
	// refusing it would end the lock under work that is running (`lock
	// run` kills its command when an extend fails) because other calls
	// of the account spent its calls. Limits stop new locks, not held
	// ones. Charged like Release.
	Extend
)

// Change is what happened to a lock after its acquire, for its account's
// held-lock count.
type Change uint8

const (
	// Released: a release released the lock; it leaves the count now.
	Released Change = iota + 1
	// Extended: the lock's lease was extended.
	Extended
	// NotHeld: a release found the token no longer holding the lock
	// (expired, or released already). The count is left as it is and the
	// lock reconciled with the masters' keys, as an extend is.
	NotHeld
)

// Admission is one request's dealings with its account's limits, from the
// moment its API key is known to its answer. The zero Admission (an
// account without limits) admits everything and records nothing, so a
// caller needs no check of its own. It is a value, kept in the request's
// own state at no allocation, and used by one request at a time.
//
// The calls, in order: Admission (Limiter.Admission) when the API key is
// known; Admit once the request is known to be valid, before the masters
// are asked; for an acquire, Reserve before and Done after it; for a
// release or an extend, Changed after it; Refund for a call admitted and
// then refused before it reached the masters; Refused for a refusal
// answered. Remain and QuotaNote are for the answer.
type Admission struct {
	st     *accountState
	remain int64
}

// Admission starts a request of account, whose API key carried lim when
// the request arrived: the zero Admission when lim limits nothing. A
// request admitted with the limits from before a reload still counts
// against its account.
func (l *Limiter) Admission(account string, lim Limits, now time.Time) Admission {
	st := l.stateFor(account, lim)
	if st == nil {
		return Admission{}
	}
	return Admission{st: st, remain: st.remain(now)}
}

// Remain is remain_quota for the answer: the calls left in the quota
// window, -1 without a quota.
func (a *Admission) Remain() int64 {
	if a.st == nil {
		return -1
	}
	return a.remain
}

// Admit charges the call to its account's quota and rate, or refuses it
// (quota, then rate) without charging. A Release or an Extend is never
// refused: ok is then true whatever the limits.
func (a *Admission) Admit(c Call, now time.Time) (r Refusal, ok bool) {
	if a.st == nil {
		return Refusal{}, true
	}
	a.remain, r = a.st.admit(now)
	if r.Reason == 0 || c == Release || c == Extend {
		return Refusal{}, true
	}
	return r, false
}

// Refund gives back what Admit charged, for a call refused before it
// reached the masters (too many waiters, too many locks).
func (a *Admission) Refund(now time.Time) {
	if a.st == nil {
		return
	}
	a.st.refund(now)
	if a.remain >= 0 {
		a.remain++
	}
}

// Reserve takes keys held-lock slots for an acquire (each key of a
// multi-key lock counts against max_locks), all or none, or refuses it.
// Every reservation ends with one Done per key.
// Held locks are counted for every account with a limit, so that a reload
// that sets max_locks finds them counted.
func (a *Admission) Reserve(keys int) (Refusal, bool) {
	if a.st == nil {
		return Refusal{}, true
	}
	return a.st.reserveLocks(keys)
}

// Refused counts a refusal of Admit or Reserve that the request answered
// (429): an idempotency begin refused a lease may still answer from its
// record, and is then not counted.
func (a *Admission) Refused(r Refusal) {
	if a.st == nil {
		return
	}
	a.st.metrics.refused(r.Reason)
}

// Done ends one key's reservation: granted, with the lock's Redis key and
// token, or not (token "").
func (a *Admission) Done(key, token string) {
	if a.st == nil {
		return
	}
	a.st.lockDone(key, token)
}

// Releasing notes that a release of the lock at key held by token (a
// held-set member: multi-key locks name "<token> <key>") has started. It
// ends with the release's Changed, or with ReleaseEnded when the release
// changed nothing to record. In between, a sync round that finds the key
// already gone on the masters leaves the lock out of the count, and the
// release is then not subtracted again.
func (a *Admission) Releasing(key, token string) {
	if a.st == nil {
		return
	}
	a.st.mu.Lock()
	a.st.startRelease(lockID(key, token))
	a.st.mu.Unlock()
}

// ReleaseEnded ends a Releasing whose release is not recorded with
// Changed (it failed: the lock's count is left to the sync rounds).
func (a *Admission) ReleaseEnded(key, token string) {
	if a.st == nil {
		return
	}
	a.st.mu.Lock()
	a.st.endRelease(lockID(key, token))
	a.st.mu.Unlock()
}

// Changed records a release or an extend of the lock at key held by token.
func (a *Admission) Changed(key, token string, c Change) {
	if a.st == nil {
		return
	}
	a.st.lockChanged(key, token, c)
}

// QuotaNote is the seed API's note for an answer when the account's quota
// is low (under a tenth left): "enough calls, N left"; "" otherwise.
func (a *Admission) QuotaNote() string {
	if a.st == nil || a.remain < 0 || a.remain*10 >= a.st.limits().QuotaCalls {
		return ""
	}
	return "enough calls, " + fmtInt(a.remain) + " left"
}
