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

// LockerGroup is one master group as the daemon serves it: its name and
// the Locker over its masters.
type LockerGroup struct {
	Name   string
	Locker Locker
}

// groupedLocker is a Locker over several master groups: /readyz and
// /metrics show each group (NewGroupsLocker's Locker is one).
type groupedLocker interface {
	LockerGroups() []LockerGroup
	// GroupOps is how many calls of each operation (acquire, release,
	// extend, status) group i has answered since start.
	GroupOps(i int) [numGroupOps]int64
}

// The operations counted per group.
const (
	opAcquire = iota
	opRelease
	opExtend
	opStatus
	numGroupOps
)

var groupOpNames = [numGroupOps]string{"acquire", "release", "extend", "status"}

// groupsLocker routes every key to the one group redlock.Placement puts it
// on (the same placement as redlock.Groups, over the same full Redis key,
// so every replica and every library user agree).
type groupsLocker struct {
	groups []LockerGroup
	place  *redlock.Placement
	ops    [][numGroupOps]atomic.Int64
}

// NewGroupsLocker serves the groups (at least one, names unique and
// non-empty) as one Locker: Acquire, Release, Extend and Status go to the
// key's group, and their errors are *redlock.GroupError naming it. Masters
// lists every group's masters, group after group, and Quorum is the sum
// of the groups' quorums: only the per-group views (/readyz's groups,
// the redlock_group_* metrics) say whether each group has its own quorum.
// List walks the groups one after the other.
func NewGroupsLocker(groups []LockerGroup) (Locker, error) {
	names := make([]string, len(groups))
	for i, g := range groups {
		names[i] = g.Name
	}
	p, err := redlock.NewPlacement(names...)
	if err != nil {
		return nil, err
	}
	return &groupsLocker{groups: append([]LockerGroup(nil), groups...), place: p, ops: make([][numGroupOps]atomic.Int64, len(groups))}, nil
}

func (g *groupsLocker) LockerGroups() []LockerGroup { return append([]LockerGroup(nil), g.groups...) }

func (g *groupsLocker) GroupOps(i int) [numGroupOps]int64 {
	var out [numGroupOps]int64
	for op := range numGroupOps {
		out[op] = g.ops[i][op].Load()
	}
	return out
}

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
	return &redlock.GroupError{Group: g.groups[i].Name, Err: err}
}

func (g *groupsLocker) Acquire(ctx context.Context, req AcquireRequest) (Lease, error) {
	i := g.route(req.Key, opAcquire)
	l, err := g.groups[i].Locker.Acquire(ctx, req)
	return l, g.wrap(i, err)
}

func (g *groupsLocker) Release(ctx context.Context, key, token string) (int, error) {
	i := g.route(key, opRelease)
	n, err := g.groups[i].Locker.Release(ctx, key, token)
	return n, g.wrap(i, err)
}

func (g *groupsLocker) Extend(ctx context.Context, key, token string, ttl time.Duration) (Lease, error) {
	i := g.route(key, opExtend)
	l, err := g.groups[i].Locker.Extend(ctx, key, token, ttl)
	return l, g.wrap(i, err)
}

func (g *groupsLocker) Status(ctx context.Context, key string) (redlock.Status, error) {
	i := g.route(key, opStatus)
	st, err := g.groups[i].Locker.Status(ctx, key)
	return st, g.wrap(i, err)
}

// SemaphoreStatus reads the semaphore key in its group: every slot of a
// semaphore is placed by its name (redlock.Placement.Group).
func (g *groupsLocker) SemaphoreStatus(ctx context.Context, key string, permits int) (redlock.SemaphoreStatus, error) {
	i := g.route(key, opStatus)
	st, err := g.groups[i].Locker.SemaphoreStatus(ctx, key, permits)
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
	page, err := g.groups[i].Locker.List(ctx, prefix, inner, count)
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
		out = append(out, grp.Locker.Masters()...)
	}
	return out
}

func (g *groupsLocker) Quorum() int {
	n := 0
	for _, grp := range g.groups {
		n += grp.Locker.Quorum()
	}
	return n
}

func (g *groupsLocker) sum(f func(Locker) int64) int64 {
	var n int64
	for _, grp := range g.groups {
		n += f(grp.Locker)
	}
	return n
}

func (g *groupsLocker) FenceRepairs() int64 {
	return g.sum(Locker.FenceRepairs)
}

func (g *groupsLocker) Quarantines() int64 { return g.sum(Locker.Quarantines) }

func (g *groupsLocker) GrantRefusals() int64 { return g.sum(Locker.GrantRefusals) }

func (g *groupsLocker) DataLosses() map[redlock.DataLossReason]int64 {
	out := map[redlock.DataLossReason]int64{}
	for _, grp := range g.groups {
		for r, n := range grp.Locker.DataLosses() {
			out[r] += n
		}
	}
	return out
}

// LongestMaxTTL is the longest of the groups' (/readyz shows it).
func (g *groupsLocker) LongestMaxTTL() time.Duration {
	var d time.Duration
	for _, grp := range g.groups {
		if l, ok := grp.Locker.(longestMaxTTLer); ok {
			d = max(d, l.LongestMaxTTL())
		}
	}
	return d
}

// groupOf is the group a failed call's error names, and its Locker.
func groupOf(l Locker, err error) (string, Locker, bool) {
	gl, ok := l.(groupedLocker)
	var ge *redlock.GroupError
	if !ok || !errors.As(err, &ge) {
		return "", nil, false
	}
	for _, grp := range gl.LockerGroups() {
		if grp.Name == ge.Group {
			return grp.Name, grp.Locker, true
		}
	}
	return "", nil, false
}

// groupQuorum is one group's quorum counts from one snapshot of its
// masters, as /readyz and /metrics show them.
func groupQuorum(l Locker) (readyQuorum, []redlock.MasterStatus) {
	ms := l.Masters()
	q := readyQuorum{Needed: l.Quorum(), Masters: len(ms)}
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
