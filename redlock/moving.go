package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Moving serves keys while the set of master groups changes from one
// Groups (from) to another (to): a placement change. A key whose group is
// the same in both is locked in that group alone, as Groups does; a key
// that moves is locked in both its old and its new group.
//
// # The change, and why no key gets two holders
//
// Every locker of a deployment is in one of three phases: old (locks in
// from only: a plain Groups over from), moving (this type: both groups of
// a moved key) or new (a plain Groups over to). A change runs:
//
//  1. Every locker moves from old to moving (a rolling restart or reload).
//  2. When no locker is in old any more, wait max TTL: every lock an old
//     locker took, or extended, has then ended.
//  3. Every locker moves from moving to new.
//
// Claim: two lockers never hold one key at once. Phases old and new never
// run at the same time (step 2 ends old before step 3 starts new, and the
// locks old took end before new starts). Any two acquisitions in phases
// that do overlap — old with moving, or moving with new — both lock one
// common group: the key's old group (old and moving), its new group
// (moving and new), or both (moving and moving). Within that group the
// second acquisition finds the first's lock and fails (the group's own
// Redlock guarantee). A moving acquisition is all or nothing: when the
// second group refuses, the first group's lock is released before the
// call returns, so no half-taken lock blocks, or protects, anyone. The
// groups are taken in a fixed order (old group, then new), and a refused
// group is never waited for while the other is held, so two acquirers
// never wait on each other. A moving extend extends every group the lock
// holds and fails when one refuses: a lock taken in phase old, which a
// moving locker finds absent from its new group, cannot be kept alive past
// max TTL into phase new.
//
// Claim: a key's fences never go backwards: a lock L2 acquired after lock
// L1 on the same key ended has fence(L2) > fence(L1). Invariant: when any
// acquisition reports fence f, every group it locked has f written back on
// a quorum of its masters (a group's own write-back does this for its
// fence; a moving acquisition reports r = the largest of its groups'
// fences and first raises the other group's counter to r with the same
// max-assign write-back, on a quorum, while its token holds the lock
// there). L1 and L2 lock a common group G (above); L2's votes in G came
// after L1 ended, so after G's quorum held counters ≥ fence(L1); L2's
// voting quorum in G shares a master with that quorum, so G gives L2 a
// fence > fence(L1), and L2 reports that fence or a larger one. The
// groups' own assumptions (at most N − quorum masters losing data, each
// repaired before it counts; fence.go) carry over.
//
// That common group exists for any two acquisitions in overlapping
// phases, not for one in phase old and one in phase new: a key that moved
// without being locked in phase moving had its last fence from its old
// group's counter, and its new group's counter may be far below it (a new
// group starts at 0). SyncFences closes that gap: the moving lockers raise
// every group's counter to the highest any group's probes read, each
// health interval (the health loop's catch-up, spreadFence, writes it).
// Every fence of phase old was issued before step 2 began and written back
// on a quorum of its group, which the probes read within a health
// interval; step 2 lasts max TTL, so by its end every group's counters are
// above every fence of phase old (given a SyncFences round in between, and
// the catch-up reaching the new groups' masters), and a lock of phase new
// gets a fence above them.
//
// Outside the change's steps the claims do not hold: an old locker still
// running when a new one starts can grant a moved key twice. The step
// boundaries are the operator's to keep (docs/operations.md, "Changing
// the master groups").
type Moving struct {
	from, to *Groups
}

// SyncFences raises every group's fencing counters, from and to, to the
// highest any of them has read (see Moving): each group's Client writes it
// to its counting masters at its next health round. A moving locker calls
// it every health interval for as long as it is moving.
func (m *Moving) SyncFences() { syncFences(m.from, m.to) }

// SyncFences raises every group's fence floor to the highest fencing
// counter read on any of them (probes and votes) and the highest floor,
// as Moving.SyncFences does across a change: a daemon on these groups that
// comes after daemons on fewer of them without the moving phase (step 1
// skipped; the daemon's layout gate keeps it from granting until their
// locks have ended) then gives a moved key a fence above every fence its
// old group issued, once its probes have read that group's counters. The
// daemon calls it every health interval. Fences of keys that stay only
// jump upwards.
func (g *Groups) SyncFences() { syncFences(g) }

func syncFences(gss ...*Groups) {
	var clients []*Client
	for _, gs := range gss {
		for _, g := range gs.groups {
			if !slices.Contains(clients, g.Client) {
				clients = append(clients, g.Client)
			}
		}
	}
	var highest int64
	for _, c := range clients {
		highest = max(highest, c.highestFenceRead(), c.fenceFloor.Load())
	}
	for _, c := range clients {
		c.raiseFenceFloor(highest)
	}
}

// NewMoving returns the moving phase from from to to. A group that stays
// should be the same *Client in both (a key that does not move is then
// locked once); Groups that share no Client move every key whose group
// name or Client differs.
func NewMoving(from, to *Groups) *Moving { return &Moving{from: from, to: to} }

// GroupsOf is the groups a key is locked in during the change: its old
// group, then its new one if that is another Client.
func (m *Moving) GroupsOf(key string) []Group {
	old, nw := m.from.For(key), m.to.For(key)
	if old.Client == nw.Client {
		return []Group{old}
	}
	return []Group{old, nw}
}

// MovingLock is a lock held in several groups: taken by Moving.Acquire,
// or a multi-key lock of Groups.AcquireMulti or Moving.AcquireMulti. It
// has one Lock per group (a multi-key Lock for a set's part).
type MovingLock struct {
	groups []Group
	locks  []*Lock
	fence  int64
}

// Token is the lock's token, the same in every group it holds.
func (l *MovingLock) Token() string { return l.locks[0].Token() }

// Fence is the lock's fencing token: the largest of its groups' fences,
// written back to a quorum of every group it holds.
func (l *MovingLock) Fence() int64 { return l.fence }

// Groups is the names of the groups the lock holds, in acquisition order.
func (l *MovingLock) Groups() []string {
	out := make([]string, len(l.groups))
	for i, g := range l.groups {
		out[i] = g.Name
	}
	return out
}

// ValidUntil is the earliest end of validity of the lock's groups.
func (l *MovingLock) ValidUntil() time.Time {
	v := l.locks[0].ValidUntil()
	for _, lk := range l.locks[1:] {
		if u := lk.ValidUntil(); u.Before(v) {
			v = u
		}
	}
	return v
}

// Release releases the lock in every group it holds; the groups' errors
// are joined, each a *GroupError.
func (l *MovingLock) Release(ctx context.Context) error {
	var errs []error
	for i, lk := range l.locks {
		errs = append(errs, groupErr(l.groups[i].Name, lk.Release(ctx)))
	}
	return errors.Join(errs...)
}

// Extend extends the lock in every group it holds, to ttl; it fails when
// any group refuses (the lock is then not safe to keep: see Moving).
func (l *MovingLock) Extend(ctx context.Context, ttl time.Duration) error {
	for i, lk := range l.locks {
		if err := lk.Extend(ctx, ttl); err != nil {
			return groupErr(l.groups[i].Name, err)
		}
	}
	return nil
}

// Acquire locks key in each of GroupsOf(key), in that order, all or
// nothing: one refusal releases what was taken (on a context detached from
// ctx) and returns that group's error, a *GroupError. Before it returns,
// every group's fencing counter is raised to the reported fence (see
// Moving); when that write-back reaches no quorum, or validity ran out
// meanwhile, the lock is released and the error matches ErrNotObtained
// and ErrQuorumUnavailable, as a Client's acquire whose fence write-back
// failed or whose validity ran out does.
func (m *Moving) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...AcquireOption) (*MovingLock, error) {
	ml := &MovingLock{groups: m.GroupsOf(key)}
	fail := func(err error) (*MovingLock, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
		defer cancel()
		for _, lk := range ml.locks {
			// A release that fails leaves the lock to expire within ttl.
			_ = lk.Release(rctx)
		}
		return nil, err
	}
	// The lock-delay asked for goes to every group: a daemon on the new
	// groups honours the delay record in the new group only.
	var asked acquireConfig
	for _, o := range opts {
		o(&asked)
	}
	next := []AcquireOption{WithRetry(NoRetry())}
	if asked.lockDelay > 0 {
		next = append(next, WithLockDelay(asked.lockDelay))
	}
	for i, g := range ml.groups {
		var lk *Lock
		var err error
		if i == 0 {
			lk, err = g.Client.Acquire(ctx, key, ttl, opts...)
		} else {
			// One attempt, under the first group's token: never wait on a
			// group while holding another (not even a contended attempt's
			// retries), and let a release or extend that names the token
			// reach every group.
			lk, err = g.Client.Acquire(withSameToken(ctx, ml.locks[0].Token()), key, ttl, next...)
		}
		if err != nil {
			return fail(groupErr(g.Name, err))
		}
		ml.locks = append(ml.locks, lk)
		ml.fence = max(ml.fence, lk.Fence())
	}
	if err := ml.raiseFences(ctx); err != nil {
		return fail(err)
	}
	if time.Until(ml.ValidUntil()) <= 0 {
		return fail(validityRanOut("lock", len(ml.locks)))
	}
	return ml, nil
}

// Release releases key held by token in every group of GroupsOf(key), and
// returns how many masters held it in all. A group that does not hold it
// (a lock taken by a locker of phase new holds only the new group) is not
// an error; the groups' errors are joined, each a *GroupError.
func (m *Moving) Release(ctx context.Context, key, token string) (int, error) {
	n := 0
	var errs []error
	for _, g := range m.GroupsOf(key) {
		k, err := g.Client.Release(ctx, key, token)
		n += k
		if err != nil && !errors.Is(err, ErrNotHeld) {
			errs = append(errs, groupErr(g.Name, err))
		}
	}
	if n == 0 && len(errs) == 0 {
		return 0, fmt.Errorf("%w: key %q is not held by this token in any of its groups", ErrNotHeld, key)
	}
	return n, errors.Join(errs...)
}

// Extend extends key held by token in every group of GroupsOf(key) and
// fails when any group refuses (a lock taken in phase old is absent from
// the new group: it cannot be kept alive into phase new, see Moving). A
// moved key's new group is extended first, so that such a lock is refused
// there before its old group's copy is lengthened (which would keep the
// key blocked longer while its holder is told it is not held); the error
// then says why. The returned Lock is the first group extended, with the
// fence of the group that reports the largest, and the earliest validity
// and shortest TTL among the groups.
func (m *Moving) Extend(ctx context.Context, key, token string, ttl time.Duration) (*Lock, error) {
	var first *Lock
	groups := m.GroupsOf(key)
	if len(groups) == 2 {
		groups[0], groups[1] = groups[1], groups[0]
	}
	for i, g := range groups {
		lk, err := g.Client.Extend(ctx, key, token, ttl)
		if err != nil {
			if len(groups) == 2 && errors.Is(err, ErrNotHeld) {
				err = &ChangeExtendError{Group: g.Name, Err: err, Previous: i == 1}
			}
			return nil, groupErr(g.Name, err)
		}
		if first == nil {
			first = lk
		} else if lk.Fence() > first.Fence() {
			first.fence = lk.Fence()
		}
		if lk.ValidUntil().Before(first.ValidUntil()) {
			first.validUntil = lk.ValidUntil()
		}
		first.ttl = min(first.ttl, lk.TTL())
	}
	return first, nil
}

// Status is a majority read of key in each group of GroupsOf(key): held
// when any group holds it (a lock of phase old holds only the old group, a
// lock of phase new only the new one), with that group's answer.
func (m *Moving) Status(ctx context.Context, key string) (Status, error) {
	var last Status
	for _, g := range m.GroupsOf(key) {
		st, err := g.Client.Status(ctx, key)
		if err != nil {
			return Status{}, groupErr(g.Name, err)
		}
		if st.Held {
			return st, nil
		}
		last = st
	}
	return last, nil
}

// validityRanOut is the error of a lock (or multi-key set) taken in n
// groups whose validity ended before the last group's part was taken and
// its fences raised: the masters are too slow for the TTL, which a
// Client's own acquire reports as ErrQuorumUnavailable too (acquire.go,
// failure). With ErrNotObtained alone the daemon answered it as an
// internal error, 500 (a -race run of the change of groups under load).
func validityRanOut(what string, n int) error {
	return fmt.Errorf("%w: %w: validity ran out while the %s was taken in %d groups", ErrNotObtained, ErrQuorumUnavailable, what, n)
}

// raiseFences writes ml.fence back to every group whose own lock's fence
// is below it, on a quorum of that group's masters, so that the fence the
// caller gets is above every earlier holder's in every group (see Moving).
// Its error is a *GroupError matching ErrNotObtained and
// ErrQuorumUnavailable.
func (ml *MovingLock) raiseFences(ctx context.Context) error {
	for i, lk := range ml.locks {
		if lk.Fence() >= ml.fence {
			continue
		}
		g := ml.groups[i]
		c := g.Client
		var res OutcomeError
		if written := c.writeFence(ctx, lk.set(), lk.Token(), ml.fence, nil, c.quorum, true, &res); written < c.quorum {
			return groupErr(g.Name, fmt.Errorf("%w: %w: raising the fencing counter to %d reached %d of the %d masters needed: %w",
				ErrNotObtained, ErrQuorumUnavailable, ml.fence, written, c.quorum, errors.Join(res.Failures...)))
		}
	}
	return nil
}

// ChangeExtendError is a moving extend refused by a moved key's new group
// (ErrNotHeld there): either the lock was taken before the change of
// master groups (it holds only the old group) and cannot be kept alive
// into the new placement, and ends with its TTL; or it expired or was
// released. With Previous, the old group refused it after the new group
// extended it: a lock taken through the new Groups alone (phase new),
// which a moving locker cannot extend — an old locker that starts max TTL
// after the new ones stopped would not see the lengthened copy — and whose
// new group's copy ends with the TTL just given; or it expired or was
// released. It matches the refusing group's error.
type ChangeExtendError struct {
	Group    string // the group that refused
	Err      error
	Previous bool // Group is the key's previous group
}

func (e *ChangeExtendError) Error() string {
	if e.Previous {
		return fmt.Sprintf("%v (not in its previous group %s: a lock taken on the new master groups alone cannot be extended by a moving locker; extend it through the new groups; or it expired or was released)", e.Err, e.Group)
	}
	return fmt.Sprintf("%v (not in its new group %s: a lock taken before the change of master groups cannot be extended during it, and ends with its TTL; or it expired or was released)", e.Err, e.Group)
}

func (e *ChangeExtendError) Unwrap() error { return e.Err }
