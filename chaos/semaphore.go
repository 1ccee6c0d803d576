package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/redlock"
)

// Semaphore rows: the permits of redlock.AcquirePermit (N slot locks, each
// an ordinary quorum lock) under the fault model, and the counting design
// the semaphore refuses, as a negative control. I7 judges them from the
// history: never more than N holders of one name at once.

// semaphoreKill is a workload row: every client takes permits of one
// semaphore of two permits while two masters are killed and restarted
// empty.
func semaphoreKill() *Scenario {
	sc := window("semaphore-kill-2", "semaphore of 2 permits under contention; SIGKILL two masters, restart them empty: never 3 holders", []int{0, 1}, FaultKill, kill, restart)
	sc.Permits = 2
	return sc
}

// semaphoreReaches are the three holders' masters: quorums of five of
// which no master is in all three, so a master that counts holders sees at
// most two ({0,1,2}, {2,3,4}, {0,1,3}).
var semaphoreReaches = []struct {
	view int
	cut  []int
}{
	{0, []int{3, 4}}, // reaches 0, 1, 2
	{1, []int{0, 1}}, // reaches 2, 3, 4
	{0, []int{2, 4}}, // reaches 0, 1, 3
}

// semaphoreSplit: three holders of a semaphore of two permits, each
// reaching three masters only (semaphoreReaches), one after the other; the
// first two hold their permits while the third tries. With slot locks the
// third is refused (every slot it tries is held on a master it reaches);
// counting holders per master and granting at quorum (the negative
// control, countingLocker) grants all three, which I7 must see.
func semaphoreSplit(slots bool) *Scenario {
	sc := &Scenario{
		Name:    "semaphore-split",
		Summary: "semaphore of 2 permits; three holders reach masters {0,1,2}, {2,3,4}, {0,1,3}: slot locks refuse the third",
		Needs:   []FaultKind{FaultViewPartition},
	}
	if !slots {
		sc.Name = "semaphore-counting"
		sc.Summary = "negative control: the same with holders counted per master and granted at quorum: three holders of 2 permits"
		sc.Must = []string{I7}
	}
	sc.Script = func(ctx context.Context, d *Drill) error {
		const name, permits = "sem-split", 2
		ttl := min(4*time.Second, d.Cfg.Client.MaxTTL)
		lockers := []locker{d.Lib(0), d.Lib(1)}
		if !slots {
			cl, err := newCountingLockers(d)
			if err != nil {
				return err
			}
			defer func() {
				for _, l := range cl {
					l.close()
				}
			}()
			lockers = []locker{cl[0], cl[1]}
		}
		type held struct {
			l  locker
			h  holder
			ok bool
		}
		var hs []held
		var errs []error
		for i, r := range semaphoreReaches {
			what := fmt.Sprintf("view %c cut off from masters %v while holder %d acquires", 'a'+r.view, r.cut, i+1)
			if err := d.Fault(ctx, what, r.view, r.cut, bind(d, partition(r.view, true))); err != nil {
				return err
			}
			// Each retries for a while: a slow answer on a loaded
			// machine fails an attempt, and the first two must hold. The
			// third's retries only give it more chances to get in.
			a := acquireArgs{key: name, ttl: ttl, permits: permits, wait: 2 * time.Second}
			h := holder{client: d.NewClientID()}
			var err error
			h.g, h.id, err = d.AcquireWith(ctx, lockers[r.view], h.client, a)
			hs = append(hs, held{lockers[r.view], h, err == nil})
			if err == nil {
				d.Write(h.g.historyKey(), h.g, h.client, h.id, "begin")
			}
			if lerr := d.Lift(ctx, "undo "+what, r.view, r.cut, bind(d, partition(r.view, false))); lerr != nil {
				return lerr
			}
			switch {
			case i < permits && err != nil:
				errs = append(errs, fmt.Errorf("arrangement failed: holder %d was refused one of %d free permits: %w", i+1, permits, err))
			case i == permits && err == nil:
				d.Notef("holder 3 was granted %s (fence %d): a third holder of %d permits", h.g.historyKey(), h.g.fence, permits)
			case i == permits:
				d.Notef("holder 3 was refused: %v", err)
			}
		}
		// Careful holders: hold a moment longer (so that every holder
		// granted holds at once for a while), commit within validity, then
		// release.
		if err := d.Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
		for _, h := range hs {
			if !h.ok {
				continue
			}
			if time.Now().Before(h.h.g.validUntil) {
				d.Write(h.h.g.historyKey(), h.h.g, h.h.client, h.h.id, "commit")
			}
			_ = d.Release(ctx, h.l, h.h.client, name, h.h.g, h.h.id)
		}
		return errors.Join(errs...)
	}
	return sc
}

// countingLocker is the semaphore design redlock refuses, for the negative
// control: every master keeps the set of holders of a name (a sorted set
// scored by each holder's expiry on the master's clock) and votes yes when
// it counts fewer than N; a holder is granted when a quorum votes yes.
// It has no slots: each grant is recorded under a key of its own,
// redlock.PermitKey(name, n) with n from holders (shared by the lockers of
// a drill), its fence the highest of the voters' counters (a counter of
// its own on each master). Only permits are supported.
type countingLocker struct {
	name    string
	holders *atomic.Int64
	space   KeySpace
	pmt     time.Duration
	drift   float64
	quorum  int
	rdbs    []*redis.Client
}

// countingVote adds ARGV[1] to the holders of KEYS[1] if they are fewer
// than ARGV[2], for ARGV[3] ms, and returns a fence from KEYS[2]; 0 if
// full.
var countingVote = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return redis.call('INCR', KEYS[2])`)

// newCountingLockers returns a countingLocker per view, through the
// view's proxies (so the view's partitions apply).
func newCountingLockers(d *Drill) ([]*countingLocker, error) {
	var out []*countingLocker
	holders := new(atomic.Int64)
	for v := range d.T.Views() {
		l := &countingLocker{
			name: fmt.Sprintf("count/%c", 'a'+v), holders: holders, space: d.T.Space(), pmt: d.Cfg.Client.PerMasterTimeout,
			drift: d.Cfg.Client.DriftFactor, quorum: d.T.Masters()/2 + 1,
		}
		for _, addr := range d.T.MasterAddrs(v) {
			l.rdbs = append(l.rdbs, redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: l.pmt, ReadTimeout: l.pmt, WriteTimeout: l.pmt}))
		}
		d.setView(l.name, v)
		out = append(out, l)
	}
	return out, nil
}

func (l *countingLocker) close() {
	for _, r := range l.rdbs {
		_ = r.Close()
	}
}

func (l *countingLocker) Name() string                    { return l.name }
func (l *countingLocker) PerMasterTimeout() time.Duration { return l.pmt }

func (l *countingLocker) setKey(name string) string { return l.space.LockKey(name) + "#count" }

// each runs fn on every master at once, each bounded by the per-master
// timeout, and returns their results.
func (l *countingLocker) each(ctx context.Context, fn func(ctx context.Context, r *redis.Client) (int64, error)) []int64 {
	out := make([]int64, len(l.rdbs))
	var wg sync.WaitGroup
	for i, r := range l.rdbs {
		wg.Go(func() {
			c, cancel := context.WithTimeout(ctx, l.pmt)
			defer cancel()
			if n, err := fn(c, r); err == nil {
				out[i] = n
			}
		})
	}
	wg.Wait()
	return out
}

// Acquire tries until one attempt is granted or a.wait has passed (a
// single attempt when a.wait is 0), 20ms between attempts.
func (l *countingLocker) Acquire(ctx context.Context, a acquireArgs) (grant, error) {
	if a.permits <= 0 {
		return grant{}, errors.New("the counting control takes permits only")
	}
	giveUp := time.Now().Add(a.wait)
	for {
		g, err := l.attempt(ctx, a)
		if err == nil || !time.Now().Before(giveUp) || ctx.Err() != nil {
			return g, err
		}
		select {
		case <-ctx.Done():
			return grant{}, errors.Join(err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// attempt is one vote of every master; a refused attempt takes its token
// back from the masters that counted it.
func (l *countingLocker) attempt(ctx context.Context, a acquireArgs) (grant, error) {
	token, err := redlock.RandomToken()
	if err != nil {
		return grant{}, err
	}
	start := time.Now()
	keys := []string{l.setKey(a.key), l.space.Prefix + "chaos:count-fence"}
	fences := l.each(ctx, func(ctx context.Context, r *redis.Client) (int64, error) {
		return countingVote.Run(ctx, r, keys, token, a.permits, a.ttl.Milliseconds()).Int64()
	})
	yes := 0
	for _, f := range fences {
		if f > 0 {
			yes++
		}
	}
	validity := time.Duration(float64(a.ttl)*(1-l.drift)) - 2*time.Millisecond - time.Since(start)
	if yes < l.quorum || validity <= 0 {
		_ = l.Release(ctx, grant{key: a.key, permits: a.permits, token: token})
		return grant{}, &lockError{outcome: "held", err: fmt.Errorf("%d of %d masters counted fewer than %d holders of %s", yes, len(l.rdbs), a.permits, a.key)}
	}
	fence := slices.Max(fences)
	return grant{key: a.key, permits: a.permits, slot: int(l.holders.Add(1)), token: token, fence: fence, validUntil: start.Add(validity)}, nil
}

func (l *countingLocker) Release(ctx context.Context, g grant) error {
	removed := l.each(ctx, func(ctx context.Context, r *redis.Client) (int64, error) {
		return r.ZRem(ctx, l.setKey(g.key), g.token).Result()
	})
	if !slices.Contains(removed, 1) {
		return &lockError{outcome: "not-held", err: fmt.Errorf("no master counted this holder of %s", g.key)}
	}
	return nil
}

// AcquireMulti: the counting control takes permits only.
func (l *countingLocker) AcquireMulti(context.Context, []string, time.Duration, time.Duration) (grant, error) {
	return grant{}, errors.New("the counting control takes permits, not multi-key locks")
}

// ReleaseMulti: the counting control takes permits only.
func (l *countingLocker) ReleaseMulti(context.Context, []string, string) error {
	return errors.New("the counting control takes permits, not multi-key locks")
}

func (l *countingLocker) Status(context.Context, string) (bool, error) {
	return false, errors.New("the counting control takes permits, not locks")
}
