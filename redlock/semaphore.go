package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Semaphores: up to N holders of one name at once.
//
// A semaphore of N permits is N slot locks, PermitKey(name, 0) …
// PermitKey(name, N−1), each an ordinary Redlock lock; a holder takes one
// slot with an ordinary Acquire (the vote script, the data-loss, clock and
// counter checks, the granted-lock check, quarantine, the fence write-back:
// everything a single key has). Its Permit is that slot's Lock, with its
// own token, fencing token and TTL, released, extended and lost as any
// lock; a holder that crashes frees its slot when its TTL ends.
//
// # Why at most N holders
//
// Every holder holds one slot lock with positive validity, and each slot
// lock has at most one holder at a time (the guarantee of doc.go, under its
// assumptions and fault model, since every protection of a plain lock
// applies to it). A holder holds a slot < N, so at most N slots, hence at
// most N holders, are valid at any moment. Nothing is counted: the bound
// follows from N mutual exclusions, each of which has its own proof.
//
// Counting holders per master and granting when a quorum counts fewer than
// N is NOT safe, which is why this is not done: quorums of different
// holders need not intersect in a master that counts them all. With N = 2
// and five masters, holders granted by {0,1,2}, {2,3,4} and {0,1,3} make
// three, while no master counts more than two (TestSemaphoreCountingControl
// shows it on real masters, next to this design refusing the third).
//
// Callers with different N for one name share slots 0 … min(N)−1: the
// holders of a name are at most the largest N in use, and the holders that
// asked for N are at most N among the slots < N.

// MaxPermits is the largest number of permits a semaphore may have.
const MaxPermits = 1000

// permitSep separates a semaphore's name from its slot number in a slot
// lock's key.
const permitSep = "#permit:"

// PermitKey returns the key of slot of the semaphore name:
// "<name>#permit:<slot>". A plain lock of that key competes with the slot:
// it takes a permit away, and cannot add a holder.
func PermitKey(name string, slot int) string {
	return name + permitSep + strconv.Itoa(slot)
}

// permitQueue returns the semaphore whose slot lock has key:
// "<name>#permit:", which no slot key equals; ok is false when key is not
// a slot key. Its waiters queue by the permits they ask for
// (permitWaitQueue).
func permitQueue(key string) (string, bool) {
	base, _, ok := parsePermitKey(key)
	return base, ok
}

// ParsePermitKey splits a slot key as PermitKey writes it into the
// semaphore's name and the slot; ok is false for any other key.
func ParsePermitKey(key string) (name string, slot int, ok bool) {
	base, slot, ok := parsePermitKey(key)
	return strings.TrimSuffix(base, permitSep), slot, ok
}

// parsePermitKey splits a slot key into its semaphore ("<name>#permit:")
// and slot; ok is false when key is not a slot key as PermitKey writes
// it: digits with no leading zero, within an int. A plain lock named
// like one ("s#permit:01") is no slot of anyone's: its release frees no
// slot and wakes no semaphore's waiter.
func parsePermitKey(key string) (base string, slot int, ok bool) {
	i := strings.LastIndex(key, permitSep)
	if i < 0 {
		return "", 0, false
	}
	digits := key[i+len(permitSep):]
	if digits == "" || len(digits) > 1 && digits[0] == '0' {
		return "", 0, false
	}
	for j := 0; j < len(digits); j++ {
		if digits[j] < '0' || digits[j] > '9' {
			return "", 0, false
		}
	}
	slot, err := strconv.Atoi(digits)
	if err != nil {
		return "", 0, false
	}
	return key[:i+len(permitSep)], slot, true
}

// permitWait is a waiting AcquirePermit's semaphore (permitQueue) and
// permits.
type permitWait struct {
	base    string
	permits int
}

// permitWaitQueue is the wait queue of the callers of the semaphore base
// (permitQueue) that ask for permits: callers that ask for another number
// take other slots, so they wait apart (a caller asking for 3 behind
// waiters asking for 1 would otherwise wait for slot 0 with them). The
// NUL keeps it apart from every key a caller can name.
func permitWaitQueue(base string, permits int) string {
	return base + "\x00" + strconv.Itoa(permits)
}

// Permit is one held permit of a semaphore: the Lock of its slot
// (Lock.Key is PermitKey(name, Slot)). Release, Extend, KeepAlive, Done
// and Fence are the slot lock's.
type Permit struct {
	*Lock
	// Slot is the slot this permit holds, 0 ≤ Slot < permits.
	Slot int
}

// AcquirePermit takes one of the permits of the semaphore name for ttl:
// it tries the slot locks, starting at a random slot and going round, with
// one Acquire each (a full single-key attempt, every protection included)
// until one is granted. When every slot is held it returns an
// *OutcomeError matching ErrLockHeld whose RetryAfter is the earliest end
// among the holders that report one. WithWait waits for a permit, woken by
// the release of any slot (through any Client of the deployment), by the
// earliest holder's end, or at the latest by a poll; WithRetry,
// WithStopWaiting and WithLockDelay (for the slot taken) apply as for
// Acquire.
//
// An attempt tries one slot; when that one is refused and there are more,
// it reads every slot on every master in one round trip (grantedSlots)
// and skips the slots that read as granted to another holder on too many
// masters for a win: one quorum round trip per slot tried, and one
// attempt and one read when every slot is granted.
//
// Errors: as Acquire; ErrInvalid also for permits outside 1 to MaxPermits.
// Any error but ErrLockHeld on a slot ends the attempt (ErrQuorumUnavailable
// on one slot says the masters cannot vote now).
func (c *Client) AcquirePermit(ctx context.Context, name string, permits int, ttl time.Duration, opts ...AcquireOption) (_ *Permit, err error) {
	defer func() { err = notObtained(err) }()
	if err := checkSemaphore(name, permits); err != nil {
		return nil, err
	}
	cfg, err := c.newAcquireConfig(ttl, opts)
	if err != nil {
		return nil, err
	}
	base := name + permitSep // permitQueue of its slot keys
	cfg.permit = &permitWait{base: base, permits: permits}
	q := permitWaitQueue(base, permits)
	slot := -1
	lock, err := c.attemptThenWait(ctx, &cfg, q, nil, func(ctx context.Context) (*Lock, error) {
		freed := c.waits.takeFreed(q)
		lock, s, err := c.acquireAnyPermit(ctx, name, permits, freedSlot(freed, permits), ttl, cfg.lockDelay)
		// untried: the attempt ended without the freed slot's answer (the
		// caller left, no quorum): another head must try it.
		untried := err != nil && !errors.Is(err, ErrLockHeld)
		c.waits.triedFreed(q, freed, err == nil && PermitKey(name, s) == freed, untried)
		slot = s
		return lock, err
	})
	if err != nil {
		return nil, err
	}
	return &Permit{Lock: lock, Slot: slot}, nil
}

func checkSemaphore(name string, permits int) error {
	if name == "" {
		return fmt.Errorf("%w: name must not be empty", ErrInvalid)
	}
	if len(name) > MaxKeyBytes {
		return keyTooLong("name", len(name))
	}
	if permits < 1 || permits > MaxPermits {
		return fmt.Errorf("%w: permits %d is outside 1 to %d", ErrInvalid, permits, MaxPermits)
	}
	return nil
}

// freedSlot is the slot of key, a slot key whose release woke a waiting
// AcquirePermit (waitQueues.releasedSlot), when it is below permits; -1
// otherwise (no release noted, or one of a slot this caller does not use).
func freedSlot(key string, permits int) int {
	if _, slot, ok := parsePermitKey(key); ok && slot < permits {
		return slot
	}
	return -1
}

// acquireAnyPermit is one attempt of AcquirePermit: every slot once,
// from first (the slot whose release woke a waiter: most likely the free
// one) or, when first is -1, from a random one, until one is granted. It
// returns the lock and its slot.
func (c *Client) acquireAnyPermit(ctx context.Context, name string, permits, first int, ttl, lockDelay time.Duration) (*Lock, int, error) {
	if first < 0 {
		first = rand.IntN(permits)
	}
	held := OutcomeError{Op: "acquire", Kind: ErrLockHeld, Quorum: c.need, Masters: len(c.masters)}
	// earliest keeps the earliest end among the holders that report one.
	earliest := func(d time.Duration) {
		if d > 0 && (held.RetryAfter == 0 || d < held.RetryAfter) {
			held.RetryAfter = d
		}
	}
	var skip []slotSkip // after the first slot's refusal: grantedSlots
	for j := range permits {
		slot := (first + j) % permits
		if skip != nil && skip[slot].holders > 0 {
			// Granted to another holder on more masters than a win can
			// spare: an Acquire would be refused, as held (grantedSlots).
			held.Refused += skip[slot].holders
			earliest(skip[slot].retryAfter)
			continue
		}
		// One attempt per slot: a contended slot is not retried here
		// (the next slot may be free); the whole attempt is, when no slot
		// was granted and one was contended (retryContended).
		lock, err := c.Acquire(ctx, PermitKey(name, slot), ttl, WithLockDelay(lockDelay), WithRetry(NoRetry()))
		if err == nil {
			return lock, slot, nil
		}
		var oe *OutcomeError
		if !errors.Is(err, ErrLockHeld) || !errors.As(err, &oe) || ctx.Err() != nil {
			return nil, -1, err
		}
		held.Refused += oe.Refused
		held.Delayed += oe.Delayed
		held.Contended = held.Contended || oe.Contended
		earliest(oe.RetryAfter)
		if skip == nil {
			skip = c.grantedSlots(ctx, name, permits)
		}
	}
	return nil, -1, &held
}

// slotSkip is what the slots read (grantedSlots) says of one slot: holders
// > 0 when an Acquire of it cannot be granted now, with how many masters
// hold it and the granted holder's longest PTTL among them (0: none
// known).
type slotSkip struct {
	holders    int
	retryAfter time.Duration
}

// grantedSlots is the read an attempt at a semaphore of more than one
// permit makes once its first slot was refused, so that a full semaphore
// is refused in two round trips, not one quorum attempt per slot (up to
// MaxPermits of them; a free first slot costs no read): one script per master
// (slots_read.lua) reads every slot key's PTTL and whether its fence
// record shows its holder granted there (acquire.lua's 'g'). A slot is
// skipped when it is held on more masters than the N − need a win can do
// without, and at least one of them shows its holder granted: an Acquire
// would get fewer than need votes, and with the granted-lock check it
// would be refused as ErrLockHeld on that very evidence, RetryAfter the
// longest granted PTTL (acquire.go failure) — the answer the skip gives.
// Every other slot is tried with an Acquire, which decides with every
// check: a read that is wrong or stale only costs or saves attempts,
// it never grants. A slot held without a granted holder (callers that
// split the votes, a holder with fencing off) is tried, so that a
// contended attempt is retried as Acquire does (retryContended). A master
// that does not answer, or answers something unreadable, counts for no
// slot. No read (an all-zero result) for one permit, without
// the granted-lock check, or with a context already ended.
//
// Shared: attempts at the same semaphore that need the read while one is
// on its way take its answer (one read in flight per name and permits per
// Client, singleflight) instead of sending their own. Each read costs
// every master work in proportion to permits (about 2,000 keys at
// MaxPermits), and callers polling a full semaphore each sent one: a
// black-box pass had 16 callers of one account, polling a full semaphore
// of 1,000 permits ten times a second, starve every other key's votes of
// their per-master timeout. An answer taken from a read that began
// before this attempt's refusal is at most one read older than its own
// would be: like any read, it may miss a release since, and then costs a
// refusal that a waiter's release notification (or the caller's retry)
// ends; it never grants.
func (c *Client) grantedSlots(ctx context.Context, name string, permits int) []slotSkip {
	if permits < 2 || !c.grantedCheck() || ctx.Err() != nil {
		return make([]slotSkip, permits)
	}
	// DoChan: an attempt whose context ends first stops waiting for a read
	// another attempt started (no read: every slot is tried, and the
	// Acquires see the context's end).
	ch := c.slotsReads.DoChan(strconv.Itoa(permits)+" "+name, func() (any, error) {
		return c.readSlots(ctx, name, permits), nil
	})
	select {
	case r := <-ch:
		return r.Val.([]slotSkip)
	case <-ctx.Done():
		return make([]slotSkip, permits)
	}
}

// readSlots is grantedSlots' read: one slots_read.lua per master. The
// answer is shared (grantedSlots) and read-only.
func (c *Client) readSlots(ctx context.Context, name string, permits int) []slotSkip {
	c.slotsReadsMade.Add(1)
	skip := make([]slotSkip, permits)
	keys := make([]string, 0, 2*permits)
	for slot := range permits {
		k := PermitKey(name, slot)
		keys = append(keys, k, c.fenceRecordKey(k))
	}
	start := time.Now()
	out, _ := c.fanout(script{s: slotsReadScript, keys: keys}, start)
	present := make([]int, permits)
	granted := make([]bool, permits)
	longest := make([]int64, permits) // the longest granted PTTL seen, ms
	c.gather(ctx, out, start, nil, func(r reply) bool {
		vals, ok := r.val.([]any)
		if r.err != nil || !ok || len(vals) != 2*permits {
			return false
		}
		for slot := range permits {
			pttl, ok1 := vals[2*slot].(int64)
			g, ok2 := vals[2*slot+1].(int64)
			if !ok1 || !ok2 || pttl == -2 {
				continue
			}
			present[slot]++
			if g == 1 {
				// A key without expiry (PTTL -1, never one of ours) tells
				// no end: no RetryAfter from it, as in Acquire's.
				granted[slot] = true
				longest[slot] = max(longest[slot], pttl)
			}
		}
		return false
	}, nil)
	spare := len(c.masters) - c.need
	for slot := range permits {
		if present[slot] > spare && granted[slot] {
			skip[slot] = slotSkip{holders: present[slot], retryAfter: time.Duration(longest[slot]) * time.Millisecond}
		}
	}
	return skip
}

// SemaphoreStatus is a majority read of every slot of a semaphore.
type SemaphoreStatus struct {
	// Permits is the number of permits read (the N asked for).
	Permits int
	// Taken is how many of the slots 0 … Permits−1 a quorum holds.
	Taken int
	// NextFree is the shortest validity among the holders (Status.Validity
	// of each held slot): no permit is sure to free before it, so an
	// acquire refused now is worth retrying then. 0 when none is taken.
	NextFree time.Duration
}

// statusReaders bounds the slot reads in flight of one SemaphoreStatus.
const statusReaders = 16

// SemaphoreStatus reads the slots 0 … permits−1 of the semaphore name with
// Client.Status each (at most statusReaders at once). It returns an error
// when any slot cannot be decided (ErrQuorumUnavailable, as Status): a
// taken permit is never reported free. Errors: ErrInvalid for an empty
// name or permits outside 1 to MaxPermits.
func (c *Client) SemaphoreStatus(ctx context.Context, name string, permits int) (SemaphoreStatus, error) {
	if err := checkSemaphore(name, permits); err != nil {
		return SemaphoreStatus{}, err
	}
	if err := c.closedErr(); err != nil {
		return SemaphoreStatus{}, err
	}
	sts := make([]Status, permits)
	errs := make([]error, permits)
	sem := make(chan struct{}, statusReaders)
	var wg sync.WaitGroup
	for slot := range permits {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			sts[slot], errs[slot] = c.Status(ctx, PermitKey(name, slot))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return SemaphoreStatus{}, err
	}
	out := SemaphoreStatus{Permits: permits}
	for _, st := range sts {
		if !st.Held {
			continue
		}
		out.Taken++
		if out.Taken == 1 || st.Validity < out.NextFree {
			out.NextFree = st.Validity
		}
	}
	return out, nil
}
