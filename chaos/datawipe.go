package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redlockd/redlockd/internal/guardswitch"
	"github.com/redlockd/redlockd/redlock"
)

// dataWipe: while the workload runs, A holds the key "wipe" on masters
// 0–2 only; FLUSHALL wipes master 1, and a moment later master 2 (two
// masters at once at most). B then tries the key until A's validity has
// ended. The vote scripts see each wipe (marker, lease horizon or fencing
// counter missing) in the same round trip as the vote: masters 1 and 2
// stop voting, B wins at most 3 and 4 and is refused, and both are
// repaired and count again once A's lease horizon has passed. With the
// data-loss check and the quarantine off, masters 1 and 2 vote for B,
// who wins 1–4 while A's lock is valid (I1); their fencing counters are
// gone, so the fence may go backwards (I2).
func dataWipe(check bool) *Scenario {
	sc := &Scenario{
		Name:     "data-wipe",
		Summary:  "FLUSHALL on masters 1 and 2, one after the other, while the workload runs and A holds a lock on masters 0-2 only; data-loss check on: B is refused",
		Workload: true,
	}
	if !check {
		sc.Name = "data-wipe-nocheck"
		sc.Summary = "negative control: the same with the vote scripts' data-loss check and the quarantine off in the drill's library clients: B is granted while A holds the lock"
		sc.Options = []redlock.Option{guardOff(guardswitch.DataLossCheck), guardOff(guardswitch.Quarantine), guardOff(guardswitch.GrantedLock), guardOff(guardswitch.ExtendRestores)}
		sc.Must, sc.May = []string{I1}, []string{I2}
	}
	sc.Script = func(ctx context.Context, d *Drill) error {
		const key = "wipe"
		// A's lease spans the middle half of the workload: both wipes and
		// B's tries fall in it, and masters 1 and 2, kept out until it has
		// ended, count again before the workload stops.
		ttl := min(d.Cfg.Duration/2, d.Cfg.Client.MaxTTL)
		dm, err := openDirect(ctx, d)
		if err != nil {
			return err
		}
		defer dm.Close()
		if err := d.SleepUntil(ctx, d.Cfg.Duration/4); err != nil {
			return err
		}
		a, err := placeOnly(ctx, d, dm, key, ttl, []int{0, 1, 2})
		if err != nil {
			return err
		}
		if err := a.dropPlaceholders(ctx); err != nil {
			return err
		}
		// FLUSHALL sent to the master itself: its data is gone while the
		// process, and so its run_id, stays.
		flushAll := func(ctx context.Context, m int) error { return dm[m].FlushAll(ctx).Err() }
		wipe := func(m int) error {
			return d.Fault(ctx, fmt.Sprintf("FLUSHALL master %d", m), AllViews, []int{m}, flushAll)
		}
		if err := wipe(1); err != nil {
			return err
		}
		if err := d.Sleep(ctx, ttl/8); err != nil {
			return err
		}
		if err := wipe(2); err != nil {
			return err
		}
		if !time.Now().Before(a.g.validUntil) {
			return fmt.Errorf("arrangement failed: A's lease (%v) was over before master 2 was wiped", ttl)
		}
		// The daemons keep their data-loss check in both rows: only the
		// control's library client contends there.
		contenders := []locker{d.Lib(1)}
		if h := d.HTTP(1); check && h != nil {
			contenders = append(contenders, h)
		}
		if _, err := contendVia(ctx, d, key, d.Cfg.TTL, a, contenders...); err != nil {
			return err
		}
		if check {
			var seen []string
			for _, m := range []int{1, 2} {
				st := d.Client(1).Masters()[m]
				seen = append(seen, fmt.Sprintf("master %d %s (%s)", m, st.State, st.QuarantineReason))
			}
			d.Notef("client B saw %s", strings.Join(seen, "; "))
		}
		return d.Heal(ctx, "masters 1 and 2 repaired", AllViews, []int{1, 2}, nil)
	}
	return sc
}
