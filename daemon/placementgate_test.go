package daemon

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/redlock"
)

// TestPlacementGatePermit: the layout gate's permit lasts the lease from
// the round's send, not from its answer; a round that a quorum answered
// without registering (another stable layout may be locking) ends it at
// once; a round without a quorum leaves it to run out. Before the first
// round a check waits for it.
func TestPlacementGatePermit(t *testing.T) {
	const interval = 100 * time.Millisecond
	g := NewPlacementGate(interval, "", time.Second, func() time.Duration { return time.Second })
	lease := placementAlive(interval) / 2
	require.Equal(t, time.Second, lease, "half of the 2 s a registration lives at the least")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, g.check(ctx), context.DeadlineExceeded, "before the first round a check waits for it")

	now := time.Now()
	g.Seen(PlacementReading{OK: true, Registered: true, Sent: now})
	require.NoError(t, g.check(context.Background()), "a round that registered gives a permit")

	g.Seen(PlacementReading{OK: false, Sent: now.Add(10 * time.Millisecond)})
	require.NoError(t, g.check(context.Background()), "a round without a quorum leaves the permit to run out")

	g.Seen(PlacementReading{OK: true, Registered: false, UntilMS: now.UnixMilli() + 5000, Sent: now})
	err := g.check(context.Background())
	require.ErrorIs(t, err, redlock.ErrQuorumUnavailable)
	var pc *PlacementConflictError
	require.True(t, errors.As(err, &pc))
	assert.Equal(t, now.UnixMilli()+5000, pc.OthersUntil)
}

// TestPlacementGateAfterAPause: a daemon whose last round registered more
// than the lease ago (paused, cut off) decides nothing from it: its check
// asks the registry for a round at once and waits for one sent after the
// permit ended, then refuses when that round saw another stable layout
// (the black-box pass: a daemon on the old groups paused through a change
// of master groups, then resumed and granted moved keys twice), goes on
// when it registered, and refuses when the first group gave no quorum:
// nothing then shows that no other layout locks (just after a pause the
// masters do not count until their clocks are read again; a first version
// that let the lock's own quorum decide granted there, under -race).
func TestPlacementGateAfterAPause(t *testing.T) {
	const interval = 100 * time.Millisecond
	lease := placementAlive(interval) / 2
	for _, tc := range []struct {
		name  string
		round PlacementReading
		want  error
	}{
		{"another layout registered meanwhile", PlacementReading{OK: true, UntilMS: 1}, redlock.ErrQuorumUnavailable},
		{"registered again", PlacementReading{OK: true, Registered: true}, nil},
		{"no quorum of the first group", PlacementReading{Err: &redlock.OutcomeError{Op: "placement", Kind: redlock.ErrQuorumUnavailable}}, redlock.ErrQuorumUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewPlacementGate(interval, "", time.Second, func() time.Duration { return time.Second })
			g.Seen(PlacementReading{OK: true, Registered: true, Sent: time.Now().Add(-lease - time.Millisecond)})
			got := make(chan error, 1)
			go func() { got <- g.check(context.Background()) }()
			select {
			case <-g.kick:
			case err := <-got:
				t.Fatalf("decided on the old round alone: %v", err)
			case <-time.After(5 * time.Second):
				t.Fatal("no round asked for")
			}
			select {
			case err := <-got:
				t.Fatalf("decided before the new round: %v", err)
			case <-time.After(20 * time.Millisecond):
			}
			r := tc.round
			r.Sent = time.Now()
			g.Seen(r)
			err := <-got
			if tc.want == nil {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, tc.want)
			}
		})
	}
}

// TestPlacementGateAwait: a waiting acquire's check (await) waits through
// rounds without a quorum until one registers; with no round registering
// it answers the refusal at the end of its wait, not before; a shutdown
// (stop) ends it with the refusal; without a wait it answers at once.
func TestPlacementGateAwait(t *testing.T) {
	const interval = 100 * time.Millisecond
	lease := placementAlive(interval) / 2
	noQuorum := func() PlacementReading {
		return PlacementReading{Sent: time.Now(), Err: &redlock.OutcomeError{Op: "placement", Kind: redlock.ErrQuorumUnavailable}}
	}
	refusing := func() *PlacementGate {
		g := NewPlacementGate(interval, "", time.Second, func() time.Duration { return time.Second })
		g.Seen(PlacementReading{OK: true, Registered: true, Sent: time.Now().Add(-lease - time.Millisecond)})
		g.Seen(noQuorum())
		return g
	}
	ctx := context.Background()

	t.Run("no wait: refused at once", func(t *testing.T) {
		assert.ErrorIs(t, refusing().await(ctx, time.Time{}, nil), redlock.ErrQuorumUnavailable)
	})
	t.Run("a round registers within the wait", func(t *testing.T) {
		g := refusing()
		got := make(chan error, 1)
		go func() { got <- g.await(ctx, time.Now().Add(time.Minute), nil) }()
		for range 3 {
			time.Sleep(20 * time.Millisecond)
			g.Seen(noQuorum())
		}
		select {
		case err := <-got:
			t.Fatalf("answered while no round registered: %v", err)
		default:
		}
		g.Seen(PlacementReading{OK: true, Registered: true, Sent: time.Now()})
		assert.NoError(t, <-got)
	})
	t.Run("no round registers: refused when the wait ends", func(t *testing.T) {
		g := refusing()
		giveUp := time.Now().Add(300 * time.Millisecond)
		err := g.await(ctx, giveUp, nil)
		assert.ErrorIs(t, err, redlock.ErrQuorumUnavailable)
		assert.False(t, time.Now().Before(giveUp), "answered before the wait ended")
	})
	t.Run("a shutdown ends the wait", func(t *testing.T) {
		g := refusing()
		stop := make(chan struct{})
		got := make(chan error, 1)
		go func() { got <- g.await(ctx, time.Now().Add(time.Minute), stop) }()
		close(stop)
		assert.ErrorIs(t, <-got, redlock.ErrQuorumUnavailable)
	})
}

// TestPlacementAdmit: a repaired master is admitted to the registry's
// count when a quorum of the other masters count and none shows another
// stable layout in force (answer 0); not when one does (it may be the only
// one left holding a registration the repaired master lost), nor when
// fewer than a quorum of the others count (three masters repaired: a
// registration in force may be on none of the two left).
func TestPlacementAdmit(t *testing.T) {
	repaired := time.Now().Add(-time.Minute)
	answers := func(codes []int64, freshOnes ...int) []redlock.MasterAnswer {
		out := make([]redlock.MasterAnswer, len(codes))
		for i, c := range codes {
			out[i] = redlock.MasterAnswer{Index: i, Code: c}
		}
		for _, i := range freshOnes {
			out[i].KeptSince = repaired
		}
		return out
	}
	run := func(as []redlock.MasterAnswer) map[int]time.Time {
		admitted := map[int]time.Time{}
		fresh := func(a redlock.MasterAnswer) bool {
			return !a.KeptSince.IsZero() && !admitted[a.Index].Equal(a.KeptSince)
		}
		valid := func(a redlock.MasterAnswer) bool { return a.Err == nil && (a.Code == 0 || a.Code == 1) }
		admit(as, fresh, valid, 3, admitted)
		return admitted
	}
	assert.Equal(t, map[int]time.Time{0: repaired}, run(answers([]int64{1, 1, 1, 1, 1}, 0)), "four others count, none ahead")
	assert.Equal(t, map[int]time.Time{0: repaired, 1: repaired}, run(answers([]int64{1, 1, 1, 1, 1}, 0, 1)), "three others count")
	assert.Empty(t, run(answers([]int64{1, 1, 0, 1, 1}, 0)), "another layout in force on a master that counts")
	assert.Empty(t, run(answers([]int64{1, 1, 1, 1, 1}, 0, 1, 2)), "two others count: fewer than a quorum")
	failed := answers([]int64{1, 1, 1, 1, 1}, 0)
	failed[3].Err, failed[4].Err = errors.New("timeout"), errors.New("timeout")
	assert.Empty(t, run(failed), "two others answered")
}

// TestJumpFencesNamesTheGroupWithoutAQuorum: the fence jump after a change
// of groups needs a quorum of every group, and its error names the group
// that lacked one. A black-box pass read only the first group's name in
// the 503 (its quorum was there) while the new group g2 was paused.
func TestJumpFencesNamesTheGroupWithoutAQuorum(t *testing.T) {
	d := newDeployment(t)
	var up []string
	for _, s := range d.servers {
		up = append(up, s.Addr())
	}
	// Five addresses nothing listens on (ports below 1024 that no test
	// binds): every call is refused.
	down := []string{"127.0.0.1:9", "127.0.0.1:13", "127.0.0.1:17", "127.0.0.1:19", "127.0.0.1:37"}
	groups := []redlock.Group{{Name: "g0", Client: d.clientOn(t, up)}, {Name: "g2", Client: d.clientOn(t, down)}}
	err := JumpFences(context.Background(), groups, d.prefix+"jump", 10)
	require.ErrorIs(t, err, redlock.ErrQuorumUnavailable)
	assert.Contains(t, err.Error(), "master group g2: ")
	assert.NotContains(t, err.Error(), "master group g0")
}
