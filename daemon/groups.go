package daemon

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// The operations counted per group.
const (
	opAcquire = iota
	opRelease
	opExtend
	opStatus
	numGroupOps
)

// groupsLocker routes every key to the one group redlock.Placement puts it
// on (the same placement as redlock.Groups, over the same full Redis key,
// so every replica and every library user agree).
type groupsLocker struct {
	names  []string
	groups []redlockLocker
	place  *redlock.Placement
	ops    [][numGroupOps]atomic.Int64
	// lib routes the multi-key locks that span groups
	// (redlock.Groups.AcquireMulti).
	lib *redlock.Groups
	// since is when this daemon started locking on these groups (its
	// start): /readyz's placement since_ms of a stable daemon, which
	// `redlockd groups-change` compares with step 2's wait.
	since time.Time
	// registryUntil: what the placement registry (placements.go) says
	// of the daemons on other groups — the previous groups' while moving,
	// any other stable layout's while stable: until when they may still be
	// locking (unix ms; 0 none registered, -1 not read from a quorum yet).
	registryUntil atomic.Int64
	// registryRead: when the last reading from a quorum was sent (unix ms;
	// 0 none yet). A reading sent before registryUntil saw those
	// registrations live, and a later one may be renewed: groups-change
	// ends step 2 only on a reading sent after it (a test under load saw
	// step 2 called done on a reading one renewal old, and the daemons on
	// the new groups answer 503 until the renewal's end + the max TTL).
	registryRead atomic.Int64
}

// NewGroupsLocker serves the groups (at least one, names unique and
// non-empty) as one Locker: Acquire, Release, Extend and Status go to the
// key's group, and their errors are *redlock.GroupError naming it; a
// multi-key lock whose keys live on several groups goes through
// redlock.Groups. Its MasterHealth lists every group's masters, group
// after group, with Quorum the sum of the groups' quorums; Groups has
// each group's own view (/readyz's groups, the redlock_group_* metrics).
// List walks the groups one after the other. The Clients stay the
// caller's to Close.
func NewGroupsLocker(groups []redlock.Group) (MasterLocker, error) {
	return newGroupsLocker(groups)
}

func newGroupsLocker(groups []redlock.Group) (*groupsLocker, error) {
	lib, err := redlock.NewGroups(groups...)
	if err != nil {
		return nil, err
	}
	gl := &groupsLocker{names: make([]string, len(groups)), groups: make([]redlockLocker, len(groups)), lib: lib,
		ops: make([][numGroupOps]atomic.Int64, len(groups)), since: time.Now()}
	for i, g := range groups {
		gl.names[i], gl.groups[i] = g.Name, redlockLocker{g.Client}
	}
	if gl.place, err = redlock.NewPlacement(gl.names...); err != nil {
		return nil, err
	}
	gl.registryUntil.Store(-1)
	return gl, nil
}

// routeSet is the group of every key of a multi-key lock, counted as one
// call of op, or -1 when the keys live on several groups (counted on
// each).
func (g *groupsLocker) routeSet(keys []string, op int) int {
	first := g.place.Group(keys[0])
	for _, k := range keys[1:] {
		if g.place.Group(k) != first {
			seen := map[int]bool{}
			for _, k := range keys {
				if i := g.place.Group(k); !seen[i] {
					seen[i] = true
					g.ops[i][op].Add(1)
				}
			}
			return -1
		}
	}
	g.ops[first][op].Add(1)
	return first
}

func (g *groupsLocker) acquireSet(ctx context.Context, req AcquireRequest) (Lease, error) {
	if i := g.routeSet(req.Keys, opAcquire); i >= 0 {
		l, err := g.groups[i].Acquire(ctx, req)
		return l, g.wrap(i, err)
	}
	ml, err := g.lib.AcquireMulti(ctx, req.Keys, req.TTL, acquireOptions(req)...)
	if err != nil {
		return Lease{}, err
	}
	return Lease{Token: ml.Token(), Fence: ml.Fence(), ValidUntil: ml.ValidUntil()}, nil
}

func (g *groupsLocker) ReleaseMulti(ctx context.Context, keys []string, token string) (int, error) {
	if i := g.routeSet(keys, opRelease); i >= 0 {
		n, err := g.groups[i].ReleaseMulti(ctx, keys, token)
		return n, g.wrap(i, err)
	}
	return g.lib.ReleaseMulti(ctx, keys, token)
}

func (g *groupsLocker) ExtendMulti(ctx context.Context, keys []string, token string, ttl time.Duration) (Lease, error) {
	if i := g.routeSet(keys, opExtend); i >= 0 {
		l, err := g.groups[i].ExtendMulti(ctx, keys, token, ttl)
		return l, g.wrap(i, err)
	}
	lk, err := g.lib.ExtendMulti(ctx, keys, token, ttl)
	if err != nil {
		return Lease{}, err
	}
	return extendedLease(lk), nil
}

func (g *groupsLocker) StatusMulti(ctx context.Context, keys []string) (redlock.MultiStatus, error) {
	if i := g.routeSet(keys, opStatus); i >= 0 {
		st, err := g.groups[i].StatusMulti(ctx, keys)
		return st, g.wrap(i, err)
	}
	return g.lib.StatusMulti(ctx, keys)
}

// groupOps is how many calls of each operation group i was sent.
func (g *groupsLocker) groupOps(i int) GroupOps {
	n := &g.ops[i]
	return GroupOps{Acquire: n[opAcquire].Load(), Release: n[opRelease].Load(), Extend: n[opExtend].Load(), Status: n[opStatus].Load()}
}

// LockGroup is the index, in the current master_groups, of the group lock
// key is placed in: where the account limits' held set counts it
// (limits.Limiter.PlaceBy).
func (g *groupsLocker) LockGroup(key string) int { return g.place.Group(key) }

// route is the index of key's group, counted as one call of op.
func (g *groupsLocker) route(key string, op int) int {
	i := g.place.Group(key)
	g.ops[i][op].Add(1)
	return i
}

func (g *groupsLocker) wrap(i int, err error) error {
	if err == nil {
		return nil
	}
	return &redlock.GroupError{Group: g.names[i], Err: err}
}

func (g *groupsLocker) Acquire(ctx context.Context, req AcquireRequest) (Lease, error) {
	if req.Keys != nil {
		return g.acquireSet(ctx, req)
	}
	i := g.route(req.Key, opAcquire)
	l, err := g.groups[i].Acquire(ctx, req)
	return l, g.wrap(i, err)
}

func (g *groupsLocker) Release(ctx context.Context, key, token string) (int, error) {
	i := g.route(key, opRelease)
	n, err := g.groups[i].Release(ctx, key, token)
	return n, g.wrap(i, err)
}

func (g *groupsLocker) Extend(ctx context.Context, key, token string, ttl time.Duration) (Lease, error) {
	i := g.route(key, opExtend)
	l, err := g.groups[i].Extend(ctx, key, token, ttl)
	return l, g.wrap(i, err)
}

func (g *groupsLocker) Status(ctx context.Context, key string) (redlock.Status, error) {
	i := g.route(key, opStatus)
	st, err := g.groups[i].Status(ctx, key)
	return st, g.wrap(i, err)
}

// SemaphoreStatus reads the semaphore key in its group: every slot of a
// semaphore is placed by its name (redlock.Placement.Group).
func (g *groupsLocker) SemaphoreStatus(ctx context.Context, key string, permits int) (redlock.SemaphoreStatus, error) {
	i := g.route(key, opStatus)
	st, err := g.groups[i].SemaphoreStatus(ctx, key, permits)
	return st, g.wrap(i, err)
}

// List pages through group 0, then group 1, and so on. Its cursor is
// "<group index>:<the group's cursor>".
func (g *groupsLocker) List(ctx context.Context, prefix, cursor string, count int) (redlock.ListPage, error) {
	i, inner := 0, ""
	if cursor != "" {
		idx, rest, ok := strings.Cut(cursor, ":")
		n, err := strconv.Atoi(idx)
		if !ok || err != nil || n < 0 || n >= len(g.groups) || idx != strconv.Itoa(n) {
			return redlock.ListPage{}, fmt.Errorf("%w: cursor: not a cursor of this listing; pass \"\" to start, then each page's cursor unchanged, with the same prefix", redlock.ErrInvalid)
		}
		i, inner = n, rest
	}
	page, err := g.groups[i].List(ctx, prefix, inner, count)
	if err != nil {
		return redlock.ListPage{}, g.wrap(i, err)
	}
	switch {
	case page.Cursor != "":
		page.Cursor = strconv.Itoa(i) + ":" + page.Cursor
	case i+1 < len(g.groups):
		page.Cursor = strconv.Itoa(i+1) + ":"
	}
	return page, nil
}

func (g *groupsLocker) Masters() []redlock.MasterStatus {
	var out []redlock.MasterStatus
	for _, grp := range g.groups {
		out = append(out, grp.Masters()...)
	}
	return out
}

func (g *groupsLocker) Quorum() int {
	n := 0
	for _, grp := range g.groups {
		n += grp.Quorum()
	}
	return n
}

// Counters are the sums of the groups' counters.
func (g *groupsLocker) Counters() HealthCounters {
	out := HealthCounters{DataLosses: map[redlock.DataLossReason]int64{}}
	for _, grp := range g.groups {
		c := grp.Counters()
		out.FenceRepairs += c.FenceRepairs
		out.Quarantines += c.Quarantines
		out.GrantRefusals += c.GrantRefusals
		out.ContendedRetries += c.ContendedRetries
		for r, n := range c.DataLosses {
			out.DataLosses[r] += n
		}
	}
	return out
}

// LongestMaxTTL is the longest of the groups'.
func (g *groupsLocker) LongestMaxTTL() time.Duration {
	var d time.Duration
	for _, grp := range g.groups {
		d = max(d, grp.LongestMaxTTL())
	}
	return d
}

// ClockBounds is the zero value, not known: each group's Client has
// bounds of its own, and /readyz shows none.
func (g *groupsLocker) ClockBounds() redlock.ClockBounds { return redlock.ClockBounds{} }

// Groups is each group's view, placed stably over all of them.
func (g *groupsLocker) Groups() *GroupsHealth {
	gh := &GroupsHealth{Groups: make([]GroupHealth, len(g.groups)), To: append([]string(nil), g.names...), Since: g.since, RegistryUntilMS: g.registryUntil.Load(), RegistryReadMS: g.registryRead.Load()}
	for i, grp := range g.groups {
		gh.Groups[i] = GroupHealth{Name: g.names[i], Health: grp, Ops: g.groupOps(i)}
	}
	return gh
}

// RegistrySeen records a reading of the placement registry
// (RunPlacementRegistry's seen). A reading from fewer than a quorum says
// nothing, and the latest end read stands: the registry's scores only grow.
// readMS is when the reading was sent (unix ms, this daemon's clock).
func (g *groupsLocker) RegistrySeen(untilMS, readMS int64, ok bool) {
	if ok {
		raiseTo(&g.registryUntil, untilMS)
		raiseTo(&g.registryRead, readMS)
	}
}

// raiseTo sets a to v unless it already holds as much.
func raiseTo(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// groupOf is the group a failed call's error names, and its health.
func groupOf(h MasterHealth, err error) (string, MasterHealth, bool) {
	var ge *redlock.GroupError
	gh := h.Groups()
	if gh == nil || !errors.As(err, &ge) {
		return "", nil, false
	}
	for _, grp := range gh.Groups {
		if grp.Name == ge.Group {
			return grp.Name, grp.Health, true
		}
	}
	return "", nil, false
}

// groupQuorum is one group's quorum counts from one snapshot of its
// masters, as /readyz and /metrics show them.
func groupQuorum(h MasterHealth) (readyQuorum, []redlock.MasterStatus) {
	ms := h.Masters()
	q := readyQuorum{Needed: h.Quorum(), Masters: len(ms)}
	for i := range ms {
		st := &ms[i]
		if st.Up {
			q.Up++
		}
		if st.Counting {
			q.Counting++
		}
		if writable(st) {
			q.Writable++
		}
	}
	q.Available = q.Writable >= q.Needed
	return q, ms
}
