package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// lockDelay: holder A takes a key through daemon a with a lock-delay and
// then stalls (no extend, no release) past its TTL; contender B tries the
// key with single attempts from the end of A's validity until well after
// the delay. With every client reading the delay records B is refused
// until the delay has passed, then granted; with the drill's library
// clients blind to them (WithMaxLockDelay(0), the negative control: a
// client of the deployment set up without lock-delay) B is granted as soon
// as A's key expires, inside the delay, which I8 must see. A wakes halfway
// through the delay, sees that its validity is over and writes nothing:
// the pause the delay gives it before B writes. It releases once the
// contest is over (a release ends the delay at once).
//
// lockDelayRestart is the same with masters 0 and 1 killed and restarted
// empty as A's lease ends: they lost A's delay records, and the lease
// horizon (raised to the records' end by the acquire) keeps them from
// voting until the delay is over, so B is still refused until then.
func lockDelay(on bool) *Scenario { return lockDelayRow(on, nil) }

func lockDelayRestart() *Scenario { return lockDelayRow(true, []int{0, 1}) }

func lockDelayRow(on bool, restarted []int) *Scenario {
	sc := &Scenario{
		Name:    "lock-delay",
		Summary: "A (through daemon a) holds a key with a 2s lock-delay and stalls past its TTL: B is refused until the delay has passed",
	}
	if len(restarted) > 0 {
		sc.Name = fmt.Sprintf("lock-delay-restart-%d", len(restarted))
		sc.Summary = fmt.Sprintf("the same, with masters %v killed and restarted empty (their delay records lost) as A's lease ends: B is refused until the delay has passed", restarted)
		sc.Needs = []FaultKind{FaultKill, FaultRestart}
	}
	if !on {
		sc.Name = "lock-delay-off"
		sc.Summary = "negative control: the same with the drill's library clients not reading the delay records: B is granted inside the delay"
		sc.Options = []redlock.Option{redlock.WithMaxLockDelay(0)}
		sc.Must = []string{I8}
	}
	sc.Script = func(ctx context.Context, d *Drill) error {
		const key = "delay"
		ttl := d.Cfg.TTL
		delay := min(2*time.Second, d.Cfg.Client.MaxTTL-ttl)
		h := d.HTTP(0)
		if h == nil {
			return errors.New("arrangement failed: the row needs daemon a, whose client reads and writes the delay records")
		}
		a := holder{client: d.NewClientID()}
		sent := time.Now()
		var err error
		a.g, a.id, err = d.AcquireWith(ctx, h, a.client, acquireArgs{key: key, ttl: ttl, wait: 2 * time.Second, lockDelay: delay})
		if err != nil {
			return fmt.Errorf("arrangement failed: A could not acquire %s with a lock-delay: %w", key, err)
		}
		d.Write(key, a.g, a.client, a.id, "begin")
		at := d.rec.Now()
		d.rec.Faulted("holder A stalls past its TTL: no extend, no release", AllViews, at, at)
		if err := d.Sleep(ctx, time.Until(a.g.validUntil)); err != nil {
			return err
		}
		if len(restarted) > 0 {
			what := fmt.Sprintf("SIGKILL masters %v, restart them empty", restarted)
			if err := d.Fault(ctx, what, AllViews, restarted, func(ctx context.Context, m int) error {
				return errors.Join(d.T.Kill(ctx, m), d.T.RestartEmpty(ctx, m))
			}); err != nil {
				return err
			}
		}
		// The last moment the delay may end: A's acquire was sent at sent,
		// and its records end ttl + delay after its SET on each master.
		deadline := sent.Add(ttl + delay + time.Second)
		contenders := []locker{d.Lib(1)}
		if b := d.HTTP(1); on && b != nil {
			contenders = append(contenders, b)
		}
		woke := make(chan error, 1)
		go func() {
			err := d.Sleep(ctx, time.Until(a.g.validUntil.Add(delay/2)))
			at := d.rec.Now()
			d.rec.Healing("holder A wakes", AllViews, at, at)
			if err == nil && time.Now().Before(a.g.validUntil) {
				err = errors.New("arrangement failed: A woke within its validity")
			}
			woke <- err
		}()
		var refusal error
		granted := false
		for i := 0; !granted && time.Now().Before(deadline); i++ {
			b := contenders[i%len(contenders)]
			client := d.NewClientID()
			g, id, err := d.Acquire(ctx, b, client, key, ttl, 0)
			if err != nil {
				refusal = err
				if err := d.Sleep(ctx, 10*time.Millisecond); err != nil {
					return err
				}
				continue
			}
			granted = true
			d.Notef("%s was granted %s %v after A's acquire was sent (TTL %v + delay %v)", b.Name(), key, time.Since(sent).Round(time.Millisecond), ttl, delay)
			d.Write(key, g, client, id, "begin")
			d.Write(key, g, client, id, "commit")
			_ = d.Release(ctx, b, client, key, g, id)
		}
		if refusal != nil {
			var oe *redlock.OutcomeError
			if errors.As(refusal, &oe) && oe.Delayed > 0 {
				d.Notef("B's last refusal: %d master(s) refused for the delay, retry after %v", oe.Delayed, oe.RetryAfter.Round(time.Millisecond))
			} else {
				d.Notef("B's last refusal: %v", refusal)
			}
		}
		if err := <-woke; err != nil {
			return err
		}
		// A's late release finds its lock gone.
		_ = d.Release(ctx, h, a.client, key, a.g, a.id)
		if len(restarted) > 0 {
			if err := d.Heal(ctx, "restarted masters trusted again", AllViews, restarted, nil); err != nil {
				return err
			}
		}
		if !granted && on {
			return fmt.Errorf("arrangement failed: B was never granted %s, %v after A's acquire (TTL %v + delay %v)", key, time.Since(sent).Round(time.Millisecond), ttl, delay)
		}
		return nil
	}
	return sc
}
