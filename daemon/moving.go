package daemon

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// movingLocker serves the moving phase of a change of master groups
// (config previous_master_groups): every call goes through redlock.Moving,
// which locks a moved key in its previous group and its new one under one
// token (redlock/moving.go holds the safety argument). The health views
// (/readyz, /metrics, List) are those of every group of either list, as a
// groupsLocker over them shows them.
type movingLocker struct {
	*groupsLocker // every group of either list: the views, List, ops counts
	m             *redlock.Moving
	index         map[string]int // group name → index in groupsLocker
	from, to      []string
	toPlace       *redlock.Placement // the current groups' (to) placement: LockGroup
	since         time.Time
}

// NewMovingLocker serves m. groups are every distinct group of the
// previous and the current lists (each once, a group in both lists once),
// for the health views; from and to are the two lists' names, which its
// MasterHealth's Groups reports as GroupsHealth.From and To.
func NewMovingLocker(m *redlock.Moving, groups []redlock.Group, from, to []string) (MasterLocker, error) {
	gl, err := newGroupsLocker(groups)
	if err != nil {
		return nil, err
	}
	toPlace, err := redlock.NewPlacement(to...)
	if err != nil {
		return nil, err
	}
	ml := &movingLocker{groupsLocker: gl, m: m, index: map[string]int{}, from: from, to: to, toPlace: toPlace, since: time.Now()}
	for i, g := range groups {
		ml.index[g.Name] = i
	}
	return ml, nil
}

// LockGroup is the index of key's group in the current groups (to): a
// moved key is locked in both its groups, and counted in its new one.
func (l *movingLocker) LockGroup(key string) int { return l.toPlace.Group(key) }

// count counts one call of op on each group key is locked in.
func (l *movingLocker) count(key string, op int) {
	for _, g := range l.m.GroupsOf(key) {
		if i, ok := l.index[g.Name]; ok {
			l.ops[i][op].Add(1)
		}
	}
}

func (l *movingLocker) Acquire(ctx context.Context, req AcquireRequest) (Lease, error) {
	if req.Keys != nil {
		l.countSet(req.Keys, opAcquire)
		return l.acquireSet(ctx, req)
	}
	l.count(req.Key, opAcquire)
	opts := []redlock.AcquireOption{redlock.WithRetry(redlock.NoRetry())}
	if req.LockDelay > 0 {
		opts = append(opts, redlock.WithLockDelay(req.LockDelay))
	}
	return waitWhileHeld(ctx, req, func() (Lease, error) {
		if req.Permits > 0 {
			return l.acquirePermit(ctx, req, opts)
		}
		lk, err := l.m.Acquire(ctx, req.Key, req.TTL, opts...)
		if err != nil {
			return Lease{}, err
		}
		return Lease{Token: lk.Token(), Fence: lk.Fence(), ValidUntil: lk.ValidUntil()}, nil
	})
}

// movingPoll bounds the pause between two attempts of a waiting acquire in
// the moving phase.
const movingPoll = 100 * time.Millisecond

// waitWhileHeld runs attempt, and again while it answers the lock (or every
// permit) held and req.Wait has time left: the moving phase takes a key in
// two groups, one attempt each (redlock.Moving), and has no wait queue that
// a release in either group wakes, so a wait is a poll, every movingPoll at
// most (sooner when the holder's lock ends sooner), until the wait ends,
// the daemon stops its waits (req.StopWaiting) or ctx ends. A change of
// groups lasts a max TTL or so; hand-off within milliseconds comes back
// with the new groups.
func waitWhileHeld(ctx context.Context, req AcquireRequest, attempt func() (Lease, error)) (Lease, error) {
	ends := time.Now().Add(req.Wait)
	for {
		lease, err := attempt()
		left := time.Until(ends)
		if err == nil || !errors.Is(err, redlock.ErrLockHeld) || left <= 0 {
			return lease, err
		}
		pause := movingPoll
		var oe *redlock.OutcomeError
		if errors.As(err, &oe) && oe.RetryAfter > 0 {
			pause = min(pause, oe.RetryAfter)
		}
		t := time.NewTimer(min(pause, left))
		select {
		case <-t.C:
		case <-req.StopWaiting:
			t.Stop()
			return lease, err
		case <-ctx.Done():
			t.Stop()
			return lease, err
		}
	}
}

// acquirePermit takes one slot of the semaphore req.Key during a change of
// groups: each slot is a lock of its own (redlock/semaphore.go), taken
// through the moving phase like any key (in its old and its new group),
// tried once each from a random slot on; a wait repeats the pass
// (waitWhileHeld): the moving phase has no shared wait queue.
func (l *movingLocker) acquirePermit(ctx context.Context, req AcquireRequest, opts []redlock.AcquireOption) (Lease, error) {
	if req.Permits > redlock.MaxPermits {
		return Lease{}, fmt.Errorf("%w: permits %d is above the limit %d", redlock.ErrInvalid, req.Permits, redlock.MaxPermits)
	}
	first := rand.IntN(req.Permits)
	var last error
	for i := range req.Permits {
		slot := (first + i) % req.Permits
		lk, err := l.m.Acquire(ctx, redlock.PermitKey(req.Key, slot), req.TTL, opts...)
		if err == nil {
			return Lease{Token: lk.Token(), Fence: lk.Fence(), ValidUntil: lk.ValidUntil(), Slot: slot}, nil
		}
		if !errors.Is(err, redlock.ErrLockHeld) {
			return Lease{}, err
		}
		last = err
	}
	return Lease{}, last
}

// SemaphoreStatus reads every slot of the semaphore key through the
// moving phase (a slot held in either group is taken).
func (l *movingLocker) SemaphoreStatus(ctx context.Context, key string, permits int) (redlock.SemaphoreStatus, error) {
	if permits < 1 || permits > redlock.MaxPermits {
		return redlock.SemaphoreStatus{}, fmt.Errorf("%w: permits %d is not 1 to %d", redlock.ErrInvalid, permits, redlock.MaxPermits)
	}
	l.count(key, opStatus)
	out := redlock.SemaphoreStatus{Permits: permits}
	for slot := range permits {
		st, err := l.m.Status(ctx, redlock.PermitKey(key, slot))
		if err != nil {
			return redlock.SemaphoreStatus{}, err
		}
		if st.Held {
			out.Taken++
			if out.Taken == 1 || st.Validity < out.NextFree {
				out.NextFree = st.Validity
			}
		}
	}
	return out, nil
}

// acquireSet takes a multi-key lock through the moving phase: every key
// in each of its groups (redlock.Moving.AcquireMulti).
func (l *movingLocker) acquireSet(ctx context.Context, req AcquireRequest) (Lease, error) {
	ml, err := l.m.AcquireMulti(ctx, req.Keys, req.TTL, acquireOptions(req)...)
	if err != nil {
		return Lease{}, err
	}
	return Lease{Token: ml.Token(), Fence: ml.Fence(), ValidUntil: ml.ValidUntil()}, nil
}

func (l *movingLocker) countSet(keys []string, op int) {
	for _, k := range keys {
		l.count(k, op)
	}
}

func (l *movingLocker) ReleaseMulti(ctx context.Context, keys []string, token string) (int, error) {
	l.countSet(keys, opRelease)
	return l.m.ReleaseMulti(ctx, keys, token)
}

func (l *movingLocker) ExtendMulti(ctx context.Context, keys []string, token string, ttl time.Duration) (Lease, error) {
	l.countSet(keys, opExtend)
	lk, err := l.m.ExtendMulti(ctx, keys, token, ttl)
	if err != nil {
		return Lease{}, err
	}
	return extendedLease(lk), nil
}

func (l *movingLocker) StatusMulti(ctx context.Context, keys []string) (redlock.MultiStatus, error) {
	l.countSet(keys, opStatus)
	return l.m.StatusMulti(ctx, keys)
}

func (l *movingLocker) Release(ctx context.Context, key, token string) (int, error) {
	l.count(key, opRelease)
	return l.m.Release(ctx, key, token)
}

func (l *movingLocker) Extend(ctx context.Context, key, token string, ttl time.Duration) (Lease, error) {
	l.count(key, opExtend)
	lk, err := l.m.Extend(ctx, key, token, ttl)
	if err != nil {
		return Lease{}, err
	}
	return extendedLease(lk), nil
}

func (l *movingLocker) Status(ctx context.Context, key string) (redlock.Status, error) {
	l.count(key, opStatus)
	return l.m.Status(ctx, key)
}

// Groups is every group's view, placed from the previous groups to the
// current ones.
func (l *movingLocker) Groups() *GroupsHealth {
	gh := l.groupsLocker.Groups()
	gh.From, gh.To, gh.Since = l.from, l.to, l.since
	return gh
}

// readyPlacement is /readyz's placement, with master_groups:
//
//	{"phase":"moving","from":["default"],"to":["default","g1"],"since_ms":1735689600123}
//
// phase is "stable" (to: the groups; from absent; since_ms, when this
// daemon started locking on them) or "moving" (this daemon locks a moved
// key in its group of from and its group of to, since since_ms, when it
// started so; old_until_ms, until when daemons on from may still be
// locking by the placement registry, placements.go: 0 none registered,
// -1 not read from a quorum yet). `redlockd groups-change` reads it.
type readyPlacement struct {
	Phase      string   `json:"phase"`
	From       []string `json:"from,omitempty"`
	To         []string `json:"to"`
	SinceMS    int64    `json:"since_ms,omitempty"`
	OldUntilMS *int64   `json:"old_until_ms,omitempty"`
	// OthersUntilMS, stable: until when daemons on other groups may still
	// be locking (the placement registry; 0 none, -1 not read yet).
	OthersUntilMS *int64 `json:"others_until_ms,omitempty"`
	// RegistryReadMS: when this daemon last read the registry from a
	// quorum (unix ms, its own clock; 0 not yet): an old_until_ms (or
	// others_until_ms) not before it was a registration live when read,
	// which its daemon may have renewed since.
	RegistryReadMS *int64 `json:"registry_read_ms,omitempty"`
}

// placementOf is /readyz's placement of gh.
func placementOf(gh *GroupsHealth) *readyPlacement {
	if gh.From == nil {
		others, read := gh.RegistryUntilMS, gh.RegistryReadMS
		p := &readyPlacement{Phase: "stable", To: gh.To, OthersUntilMS: &others, RegistryReadMS: &read}
		if !gh.Since.IsZero() {
			p.SinceMS = gh.Since.UnixMilli()
		}
		return p
	}
	old, read := gh.RegistryUntilMS, gh.RegistryReadMS
	return &readyPlacement{Phase: "moving", From: gh.From, To: gh.To, SinceMS: gh.Since.UnixMilli(), OldUntilMS: &old, RegistryReadMS: &read}
}
