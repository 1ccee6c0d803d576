package redlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/redisproc"
)

// TestPlacementWeightVectors pins the documented hash: these weights were
// computed outside Go (Python's hashlib), as another language would.
func TestPlacementWeightVectors(t *testing.T) {
	for _, v := range []struct {
		key     string
		weights [3]uint64 // g0, g1, g2
		group   int
	}{
		{"order:pay:10086", [3]uint64{15285763949225845912, 11415169740678133705, 6395822758050919323}, 0},
		{"redlock:lock:shop::job:daily_report", [3]uint64{9639248007129764681, 14847805627840212344, 9961805278043503203}, 1},
		{"", [3]uint64{14020834710491198515, 8716620855609503564, 14285374274394555010}, 2},
	} {
		for i, g := range []string{"g0", "g1", "g2"} {
			require.Equal(t, v.weights[i], PlacementWeight(g, v.key), "weight(%s, %q)", g, v.key)
		}
		p, err := NewPlacement("g0", "g1", "g2")
		require.NoError(t, err)
		require.Equal(t, v.group, p.Group(v.key), "%q", v.key)
		// The order the groups are listed in does not matter.
		q, err := NewPlacement("g2", "g0", "g1")
		require.NoError(t, err)
		require.Equal(t, p.Names()[v.group], q.Names()[q.Group(v.key)])
	}
}

// TestPlacementSpreadsAndMovesLittle: keys spread about evenly, and adding
// a group moves keys only to it (about 1/n of them), never between the
// groups that stay.
func TestPlacementSpreadsAndMovesLittle(t *testing.T) {
	three, err := NewPlacement("g0", "g1", "g2")
	require.NoError(t, err)
	four, err := NewPlacement("g0", "g1", "g2", "g3")
	require.NoError(t, err)
	const n = 30000
	count := make([]int, 3)
	moved := 0
	for i := range n {
		key := fmt.Sprintf("redlock:lock:acct:%d", i)
		g3 := three.Group(key)
		count[g3]++
		if g4 := four.Group(key); g4 != g3 {
			require.Equal(t, 3, g4, "%s moved from g%d to g%d: only the new group may win keys", key, g3, g4)
			moved++
		}
	}
	for g, c := range count {
		require.InDelta(t, n/3, c, n/30, "group %d holds %d of %d keys", g, c, n)
	}
	require.InDelta(t, n/4, moved, n/40, "%d of %d keys moved to the new group", moved, n)
}

// TestPlacementKeepsASemaphoreInOneGroup: every slot lock of a semaphore
// is placed by the semaphore's name, so a permit taken in a group is
// released and extended there, and one group's slots bound the holders.
// Its negative control: the slot keys placed as keys of their own spread
// over the groups.
func TestPlacementKeepsASemaphoreInOneGroup(t *testing.T) {
	p, err := NewPlacement("g0", "g1", "g2")
	require.NoError(t, err)
	spread := false
	for n := range 50 {
		name := fmt.Sprintf("acct:ns:exports:%d", n)
		for slot := range 8 {
			assert.Equal(t, p.Group(name), p.Group(PermitKey(name, slot)), "semaphore %s slot %d", name, slot)
			var own int
			best := uint64(0)
			for i, g := range p.Names() {
				if w := PlacementWeight(g, PermitKey(name, slot)); i == 0 || w > best {
					own, best = i, w
				}
			}
			spread = spread || own != p.Group(name)
		}
	}
	assert.True(t, spread, "negative control: placed by their own keys, the slots would spread over the groups")
}

func TestPlacementRefusesBadGroups(t *testing.T) {
	for _, names := range [][]string{nil, {""}, {"a", "b", "a"}} {
		_, err := NewPlacement(names...)
		require.ErrorIs(t, err, ErrInvalid, "%q", names)
	}
}

// groupsOver starts groups of n real masters each, and Clients over them.
func groupsOver(t *testing.T, n int, names ...string) ([][]*redisproc.Server, []Group) {
	t.Helper()
	srvs, err := redisproc.StartN(n*len(names), redisproc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = redisproc.StopAll(srvs) })
	var byGroup [][]*redisproc.Server
	var groups []Group
	for gi, name := range names {
		grp := srvs[gi*n : (gi+1)*n]
		byGroup = append(byGroup, grp)
		groups = append(groups, Group{Name: name, Client: groupClient(t, grp)})
	}
	return byGroup, groups
}

func groupClient(t *testing.T, srvs []*redisproc.Server) *Client {
	t.Helper()
	opts := make([]*redis.Options, len(srvs))
	for i, s := range srvs {
		opts[i] = &redis.Options{Addr: s.Addr()}
	}
	c, err := New(opts, WithPerMasterTimeout(500*time.Millisecond), WithHealthInterval(100*time.Millisecond), WithMaxTTL(time.Minute))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// keysOn returns count keys that p places on group g.
func keysOn(p *Placement, g, count int, prefix string) []string {
	var out []string
	for i := 0; len(out) < count; i++ {
		if k := fmt.Sprintf("%s:%d", prefix, i); p.Group(k) == g {
			out = append(out, k)
		}
	}
	return out
}

// TestGroupsIsolateAQuorumLoss: two groups of three real masters, keys
// spread over both; two instances (two daemons' worth) place every key
// alike and exclude each other; when group a loses its quorum, keys of
// group b still lock, with fences still increasing, and keys of group a
// fail fast with a *GroupError naming a.
func TestGroupsIsolateAQuorumLoss(t *testing.T) {
	srvs, groups := groupsOver(t, 3, "a", "b")
	g1, err := NewGroups(groups...)
	require.NoError(t, err)
	// A second router over Clients of its own: another daemon replica.
	g2, err := NewGroups(Group{"b", groupClient(t, srvs[1])}, Group{"a", groupClient(t, srvs[0])})
	require.NoError(t, err)
	ctx := context.Background()

	onA := keysOn(g1.Placement(), 0, 5, "test:groups")
	onB := keysOn(g1.Placement(), 1, 5, "test:groups")
	for _, k := range append(append([]string{}, onA...), onB...) {
		require.Equal(t, g1.For(k).Name, g2.For(k).Name, "%s: both instances place it alike", k)
		lk, err := g1.Acquire(ctx, k, 10*time.Second)
		require.NoError(t, err, k)
		_, err = g2.Acquire(ctx, k, 10*time.Second)
		require.ErrorIs(t, err, ErrLockHeld, "%s is held through the other instance", k)
		var ge *GroupError
		require.ErrorAs(t, err, &ge)
		require.Equal(t, g1.For(k).Name, ge.Group)
		n, err := g2.Release(ctx, k, lk.Token())
		require.NoError(t, err)
		require.GreaterOrEqual(t, n, 2, "%s released on a quorum of its group's three masters", k)
	}
	// The keys of a are written on a's masters only.
	r := redis.NewClient(&redis.Options{Addr: srvs[1][0].Addr()})
	defer r.Close()
	lk, err := g1.Acquire(ctx, onA[0], 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, int64(0), r.Exists(ctx, onA[0]).Val(), "a key of group a is not on group b's masters")
	_, err = g1.Release(ctx, onA[0], lk.Token())
	require.NoError(t, err)

	// Group a loses its quorum.
	require.NoError(t, srvs[0][0].Kill())
	require.NoError(t, srvs[0][1].Kill())
	var last int64
	for i := range 20 {
		k := onB[i%len(onB)]
		lk, err := g2.Acquire(ctx, k, 5*time.Second)
		require.NoError(t, err, "group b's key %s while a has no quorum", k)
		require.Greater(t, lk.Fence(), last, "group b's fences keep increasing")
		last = lk.Fence()
		require.NoError(t, lk.Release(ctx))
	}
	_, err = g1.Acquire(ctx, onA[1], 5*time.Second)
	require.ErrorIs(t, err, ErrQuorumUnavailable)
	var ge *GroupError
	require.ErrorAs(t, err, &ge)
	require.Equal(t, "a", ge.Group)
	require.True(t, errors.Is(err, ErrNotObtained))
}
