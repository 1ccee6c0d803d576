package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redlockd/redlockd/internal/guardswitch"
	"github.com/redlockd/redlockd/redlock"
)

// clockJump is how far a jumped master's wall clock steps forward: past
// any lease a drill grants, so A's key on it expires at once.
const clockJump = 30 * time.Second

// jump steps master m's wall clock forward by clockJump and waits until
// A's key there is gone. Not an availability fault (the master answers
// and votes), so it is marked with no master: I5 and I6 do not count it.
func jump(ctx context.Context, d *Drill, dm direct, m int, key string) error {
	what := fmt.Sprintf("master %d's wall clock jumps %v forward", m, clockJump)
	if err := d.Mark(ctx, what, func(ctx context.Context) error { return d.T.ClockJump(ctx, m, clockJump) }); err != nil {
		return err
	}
	return keyGone(ctx, d, dm, m, key, "after its clock jumped (is the clock shim preloaded?)")
}

// clockJumpContender: A holds the key on masters 2–4 only; master 4's
// wall clock jumps 30s forward, so A's key there expires, and B asks
// within milliseconds. Every vote carries the master's TIME: master 4's
// vote shows the jump and is discarded, so B is refused. With that check
// off, B wins 0, 1 and 4 while A's lock is valid (I1). B's library client
// probes its masters once a minute, so no health probe falls between the
// jump and B's first try: only the vote's own clock reading can see it.
func clockJumpContender(guard bool) *Scenario {
	sc := &Scenario{
		Name:    "clock-jump-contender",
		Summary: "master 4, holding A's lock with masters 2 and 3, jumps its clock 30s forward and B asks within milliseconds; vote clock check on: B is refused",
		Needs:   []FaultKind{FaultClock},
		Options: []redlock.Option{redlock.WithHealthInterval(time.Minute)},
	}
	if !guard {
		sc.Name = "clock-jump-contender-novoteclock"
		sc.Summary = "negative control: the same with the vote clock check off in the drill's library clients: B is granted while A holds the lock"
		sc.Options = append(sc.Options, guardOff(guardswitch.VoteClock), guardOff(guardswitch.GrantedLock), guardOff(guardswitch.ExtendRestores))
		sc.Must = []string{I1}
	}
	sc.Script = func(ctx context.Context, d *Drill) error {
		const key = "jump"
		ttl := min(3*time.Second, d.Cfg.Client.MaxTTL)
		dm, err := openDirect(ctx, d)
		if err != nil {
			return err
		}
		defer dm.Close()
		a, err := placeOnly(ctx, d, dm, key, ttl, []int{2, 3, 4})
		if err != nil {
			return err
		}
		if err := a.dropPlaceholders(ctx); err != nil {
			return err
		}
		// B's reference readings of every master, fresh: its health loop
		// will not run before it tries.
		if err := d.Client(1).CheckMasters(ctx); err != nil {
			return err
		}
		if err := jump(ctx, d, dm, 4, key); err != nil {
			return err
		}
		// The daemons keep every check in both rows: only the control's
		// library client contends there.
		contenders := []locker{d.Lib(1)}
		if h := d.HTTP(1); guard && h != nil {
			contenders = append(contenders, h)
		}
		first, err := contendVia(ctx, d, key, d.Cfg.TTL, a, contenders...)
		if err != nil {
			return err
		}
		if st := d.Client(1).Masters()[4]; guard {
			if st.Counting {
				return fmt.Errorf("arrangement failed: client B never flagged master 4's clock (state %s)", st.State)
			}
			// The vote check sees the jump unless B's reference reading
			// was too old or imprecise (a loaded machine): then the health
			// probe that the vote asks for sees it.
			by := "by a health probe (B's reference reading was too old or imprecise for the vote check)"
			if errors.Is(first, redlock.ErrMasterClockJump) {
				by = "by the vote clock check, at B's first try"
			}
			d.Notef("client B: master 4's jump seen %s; master 4 %s (%s)", by, st.State, st.QuarantineReason)
		}
		return nil
	}
	return sc
}

// clockJumpRestart: A holds the key on masters 2–4 only; the daemons and
// the drill's own library clients stop, master 4's wall clock jumps 30s
// forward (A's key there expires), and the daemons start again, with no
// earlier reading of master 4's clock. B asks through a restarted daemon
// and through a library client started after the jump. Each compares
// every master's clock with the other masters': master 4
// disagrees and does not vote, so B is refused. With that comparison off
// (in the library client: the daemons keep theirs), master 4 counts and B
// wins 0, 1 and 4 while A's lock is valid (I1).
func clockJumpRestart(guard bool) *Scenario {
	sc := &Scenario{
		Name:    "clock-jump-restart",
		Summary: "the daemons restart after master 4, holding A's lock with masters 2 and 3, jumped its clock 30s forward while no client watched; clock reference on: B is refused",
		Needs:   []FaultKind{FaultClock},
	}
	if !guard {
		sc.Name = "clock-jump-restart-noreference"
		sc.Summary = "negative control: the same with the comparison with the other masters' clocks off in the library client started after the jump: B is granted while A holds the lock"
		sc.Options = []redlock.Option{guardOff(guardswitch.ClockReference), guardOff(guardswitch.GrantedLock), guardOff(guardswitch.ExtendRestores)}
		sc.Must = []string{I1}
	}
	sc.Script = func(ctx context.Context, d *Drill) (err error) {
		const key = "jump-restart"
		rs, ok := d.T.(DaemonRestarter)
		if !ok {
			return fmt.Errorf("the %s target cannot restart its daemons", d.T.Name())
		}
		if err := d.Mark(ctx, "daemons stopped", rs.StopDaemons); err != nil {
			return err
		}
		stopped := true
		defer func() {
			if stopped { // a failure in between: the next row needs them
				err = errors.Join(err, rs.StartDaemons(context.WithoutCancel(ctx)))
			}
		}()
		// A's lease covers the daemons' start: seconds for a container on
		// a loaded machine.
		ttl := min(8*time.Second, d.Cfg.Client.MaxTTL)
		dm, err := openDirect(ctx, d)
		if err != nil {
			return err
		}
		defer dm.Close()
		a, err := placeOnly(ctx, d, dm, key, ttl, []int{2, 3, 4})
		if err != nil {
			return err
		}
		if err := a.dropPlaceholders(ctx); err != nil {
			return err
		}
		if err := d.Mark(ctx, "the drill's library clients stopped", d.closeClients); err != nil {
			return err
		}
		if err := jump(ctx, d, dm, 4, key); err != nil {
			return err
		}
		if err := d.Unmark(ctx, "daemons started again", rs.StartDaemons); err != nil {
			return err
		}
		stopped = false
		d.hc.CloseIdleConnections() // connections to the stopped daemons are gone
		// A library client started after the jump, in view b, with the
		// row's options.
		c, err := newClient(d.T.MasterAddrs(1), d.Cfg.Client.clientOptions(d.T.Space(), d.Sc.Options...))
		if err != nil {
			return err
		}
		defer c.Close()
		b := newLibLocker("lib/b-new", clientPath(c), d.T.Space(), d.Cfg.Client.PerMasterTimeout)
		d.views[b.name] = 1 // no workload runs in this row: nothing reads views meanwhile
		contenders := []locker{b}
		if h := d.HTTP(1); guard && h != nil {
			contenders = append(contenders, h)
		}
		if !time.Now().Before(a.g.validUntil) {
			return fmt.Errorf("arrangement failed: A's lease (%v) was over before the daemons were back", ttl)
		}
		if _, err := contendVia(ctx, d, key, d.Cfg.TTL, a, contenders...); err != nil {
			return err
		}
		if st := c.Masters()[4]; guard {
			if !strings.Contains(st.QuarantineReason, "median") {
				return fmt.Errorf("arrangement failed: the library client started after the jump did not hold master 4 out for its clock (state %s, %q)", st.State, st.QuarantineReason)
			}
			d.Notef("the library client started after the jump: master 4 %s (%s)", st.State, st.QuarantineReason)
		}
		return nil
	}
	return sc
}
