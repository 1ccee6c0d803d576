package chaos

// Multi-key locks in the drills: the lockers take a set of keys as one
// lock (redlock.Client.AcquireMulti; the HTTP body's keys), the workload
// has a mode whose clients take random overlapping sets in random order,
// and two rows restart masters empty under it.
//
// A set is recorded as one Op per key of the set, each with the set's
// token's fence and validity and the same call times (Op.Set names the
// whole set), and each critical section writes "begin" and "commit" for
// every key of the set under its key's Op. So the checker, which knows
// single keys only, sees a set's hold as a hold of each of its keys: I1 (one
// holder per key), I2 (fences increasing per key, the Resource's log) and
// porcupine's fence register per key judge sets and single keys alike.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redlockd/redlockd/internal/guardswitch"
	"github.com/redlockd/redlockd/redlock"
)

func (l *libLocker) AcquireMulti(ctx context.Context, keys []string, ttl, wait time.Duration) (grant, error) {
	var opts []redlock.AcquireOption
	if wait > 0 {
		opts = append(opts, redlock.WithWait(wait))
	} else {
		opts = append(opts, redlock.WithRetry(redlock.NoRetry()))
	}
	lk, err := l.client().AcquireMulti(ctx, l.lockKeys(keys), ttl, opts...)
	if err != nil {
		return grant{}, err
	}
	return grant{token: lk.Token(), fence: lk.Fence(), validUntil: lk.ValidUntil()}, nil
}

func (l *libLocker) ReleaseMulti(ctx context.Context, keys []string, token string) error {
	_, err := l.client().ReleaseMulti(ctx, l.lockKeys(keys), token)
	return err
}

// lockKeys maps the drill's keys to the daemons' Redis keys.
func (l *libLocker) lockKeys(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = l.space.LockKey(k)
	}
	return out
}

func (l *httpLocker) AcquireMulti(ctx context.Context, keys []string, ttl, wait time.Duration) (grant, error) {
	sent := time.Now()
	body := map[string]any{"action": "acquire", "keys": keys, "ttl": int64(ttl / time.Second)}
	if wait > 0 {
		body["wait_ms"] = wait.Milliseconds()
	}
	_, r, err := l.call(ctx, body)
	if err != nil {
		return grant{}, err
	}
	if !r.Data.Acquired {
		return grant{}, &lockError{outcome: "held", err: errors.New(r.Msg)}
	}
	// As Acquire: validity counted from our send time.
	elapsed := min(time.Duration(r.Data.ElapsedMS)*time.Millisecond, time.Since(sent))
	return grant{token: r.Data.Token, fence: r.Data.Fence, validUntil: sent.Add(elapsed + time.Duration(r.Data.ValidityMS)*time.Millisecond)}, nil
}

func (l *httpLocker) ReleaseMulti(ctx context.Context, keys []string, token string) error {
	_, r, err := l.call(ctx, map[string]any{"action": "release", "keys": keys, "token": token})
	if err != nil {
		return err
	}
	if !r.Data.Released {
		return &lockError{outcome: "not-held", err: errors.New(r.Msg)}
	}
	return nil
}

// setGrant is a multi-key lock as a drill client holds it: the grant, and
// per key of the set (in the set's order) the ID of that key's acquire Op.
type setGrant struct {
	g    grant
	keys []string
	ids  []int
}

// AcquireSet takes keys as one multi-key lock through l for client, and
// records the call as one acquire Op per key (see the top of this file).
// wait 0 means a single attempt.
func (d *Drill) AcquireSet(ctx context.Context, l locker, client int, keys []string, ttl, wait time.Duration) (setGrant, error) {
	if int64(ttl) > d.maxTTL.Load() {
		d.maxTTL.Store(int64(ttl))
	}
	op := Op{
		Client: client, Via: l.Name(), View: d.viewOf(l), Kind: "acquire", Set: slices.Clone(keys), TTL: ttl,
		Bound: wait + 3*l.PerMasterTimeout() + d.Cfg.Slack, PMT: l.PerMasterTimeout(),
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), op.Bound+30*time.Second)
	defer cancel()
	op.Invoke = d.rec.Now()
	g, err := l.AcquireMulti(cctx, keys, ttl, wait)
	op.Return = d.rec.Now()
	if err != nil {
		op.Outcome, op.Err = outcomeOf(err), err.Error()
	} else {
		op.OK, op.Fence, op.ValidUntil = true, g.fence, d.rec.At(g.validUntil)
	}
	return setGrant{g: g, keys: op.Set, ids: d.addPerKey(op, op.Set)}, err
}

// ReleaseSet releases the set s through l and records the call as one
// release Op per key, each naming its key's acquire Op.
func (d *Drill) ReleaseSet(ctx context.Context, l locker, client int, s setGrant) error {
	op := Op{Client: client, Via: l.Name(), View: d.viewOf(l), Kind: "release", Set: s.keys, Bound: l.PerMasterTimeout() + d.Cfg.Slack, PMT: l.PerMasterTimeout()}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), op.Bound+30*time.Second)
	defer cancel()
	op.Invoke = d.rec.Now()
	err := l.ReleaseMulti(cctx, s.keys, s.g.token)
	op.Return = d.rec.Now()
	op.OK = err == nil
	if err != nil {
		op.Outcome, op.Err = outcomeOf(err), err.Error()
	}
	for i, k := range s.keys {
		o := op
		o.Key, o.Grant = k, s.ids[i]
		d.rec.Add(o)
	}
	return err
}

// addPerKey records op once per key of keys, with Key set, and returns the
// Op IDs in the order of keys.
func (d *Drill) addPerKey(op Op, keys []string) []int {
	ids := make([]int, len(keys))
	for i, k := range keys {
		o := op
		o.Key = k
		ids[i] = d.rec.Add(o)
	}
	return ids
}

// WriteSet writes phase to the Resource for every key of the set, each
// under its key's acquire Op, and reports whether every write was
// accepted. It writes every key even after a rejection: the Resource must
// judge each key's write.
func (d *Drill) WriteSet(s setGrant, client int, phase string) bool {
	ok := true
	for i, k := range s.keys {
		ok = d.res.Write(k, s.g.fence, client, s.ids[i], phase) && ok
	}
	return ok
}

// setClient is the workload's client loop in the multi-key mode
// (Scenario.MultiKey): take a random set of 2–3 of the Keys keys, in
// random order, so that sets overlap and are asked for in both orders;
// write "begin" for every key, work for a few ms, write "commit" for every
// key if the lock is still valid, release the set.
func (d *Drill) setClient(ctx context.Context, stop <-chan struct{}, l locker, id int) {
	ttl := d.Cfg.TTL
	for !stopped(stop) && ctx.Err() == nil {
		s, err := d.AcquireSet(ctx, l, id, d.randomSet(), ttl, ttl)
		if err == nil {
			if d.WriteSet(s, id, "begin") {
				_ = d.Sleep(ctx, d.jitter(5*time.Millisecond, 30*time.Millisecond))
				if time.Now().Before(s.g.validUntil) {
					d.WriteSet(s, id, "commit")
				}
			}
			_ = d.ReleaseSet(ctx, l, id, s)
		}
		_ = d.Sleep(ctx, d.jitter(0, 20*time.Millisecond))
	}
}

// randomSet returns 2 or 3 distinct keys of the workload's Keys (fewer
// when there are fewer), in random order.
func (d *Drill) randomSet() []string {
	d.rngMu.Lock()
	defer d.rngMu.Unlock()
	n := min(2+d.rng.IntN(2), d.Cfg.Keys)
	perm := d.rng.Perm(d.Cfg.Keys)[:n]
	keys := make([]string, n)
	for i, k := range perm {
		keys[i] = fmt.Sprintf("k%d", k)
	}
	return keys
}

// setGrantsSince counts the workload's set grants (acquires of sets by
// its clients) that were invoked at or after t, one per set.
func (d *Drill) setGrantsSince(t time.Duration) int {
	d.rec.mu.Lock()
	defer d.rec.mu.Unlock()
	n := 0
	for i := range d.rec.ops {
		op := &d.rec.ops[i]
		// One Op per key: count the first key's only.
		if op.Kind == "acquire" && op.OK && op.Client < d.Cfg.Clients && len(op.Set) > 0 && op.Key == op.Set[0] && op.Invoke >= t {
			n++
		}
	}
	return n
}

// multiKeyRestart: the workload takes random overlapping sets of 2–3 keys
// in random order. A holds the set {mk-a, mk-b} on masters 0–2 only
// (placeholders on 3 and 4 refuse it there); masters 1 and 2 then restart
// empty (two masters, the most a quorum of five tolerates), and B tries
// the set [mk-c, mk-b, mk-a] (overlapping, in the other order) until A's
// validity has ended. With the quarantine and the data-loss check masters
// 1 and 2 do not vote until A's lease horizon has passed, so B wins at most
// 3 and 4 and is refused; meanwhile the workload must keep being granted
// sets on masters 0, 3 and 4 (no deadlock, no stall: the row fails
// otherwise). With them off in the drill's library clients, masters 1 and
// 2 vote for B, who wins 1–4 while A's set is valid: I1 on mk-a and mk-b.
func multiKeyRestart(guards bool) *Scenario {
	sc := &Scenario{
		Name:     "multikey-restart-2",
		Summary:  "multi-key workload (random overlapping sets, both orders); A holds a set on masters 0-2 only; masters 1 and 2 restart empty; quarantine on: B's overlapping set is refused, the workload keeps being granted sets",
		Needs:    []FaultKind{FaultRestart},
		Workload: true,
		MultiKey: true,
		// The script outlasts Config.Duration (A's lease, the quarantine)
		// and keeps the workload running to its own end.
		ScriptEnds: true,
	}
	if !guards {
		sc.Name = "multikey-restart-2-noquarantine"
		sc.Summary = "negative control: the same with the quarantine, the data-loss check and the granted-lock check off in the drill's library clients: B's set is granted while A's set holds two of its keys"
		sc.Options = []redlock.Option{guardOff(guardswitch.Quarantine), guardOff(guardswitch.DataLossCheck), guardOff(guardswitch.GrantedLock), guardOff(guardswitch.ExtendRestores)}
		sc.Must, sc.May = []string{I1}, []string{I2}
	}
	sc.Script = func(ctx context.Context, d *Drill) error {
		aKeys := []string{"mk-a", "mk-b"}
		bKeys := []string{"mk-c", "mk-b", "mk-a"}
		// As long as the clients allow: A's placement and two masters
		// restarting (fresh containers on compose) take a while on a
		// loaded machine, and B must contend after them.
		ttl := d.Cfg.Client.MaxTTL
		dm, err := openDirect(ctx, d)
		if err != nil {
			return err
		}
		defer dm.Close()
		if err := d.SleepUntil(ctx, d.Cfg.Duration/4); err != nil {
			return err
		}
		a, err := placeSetOnly(ctx, d, dm, aKeys, ttl, []int{0, 1, 2})
		if err != nil {
			return err
		}
		if err := d.Fault(ctx, "masters 1 and 2 restart empty", AllViews, []int{1, 2}, bind(d, restart)); err != nil {
			return err
		}
		faulted := d.rec.Now()
		if !time.Now().Before(a.s.g.validUntil) {
			return fmt.Errorf("arrangement failed: masters 1 and 2 took longer to restart than A's lease (%v) lasted", ttl)
		}
		// The daemons keep their guards in both rows: only the control's
		// library client contends there.
		contenders := []locker{d.Lib(1)}
		if h := d.HTTP(1); guards && h != nil {
			contenders = append(contenders, h)
		}
		if err := contendSetVia(ctx, d, bKeys, d.Cfg.TTL, a, contenders...); err != nil {
			return err
		}
		if err := d.Heal(ctx, "masters 1 and 2 trusted again", AllViews, []int{1, 2}, nil); err != nil {
			return err
		}
		healed := d.rec.Now()
		// The workload runs on with every master counting for a while, and
		// at least until the row's duration.
		if err := d.Sleep(ctx, 2*time.Second); err != nil {
			return err
		}
		if d.rec.Now() < d.Cfg.Duration {
			if err := d.SleepUntil(ctx, d.Cfg.Duration); err != nil {
				return err
			}
		}
		after := d.setGrantsSince(healed)
		during := d.setGrantsSince(faulted) - after
		if during+after == 0 {
			return fmt.Errorf("the workload was granted no set in the %v after masters 1 and 2 restarted: stalled or deadlocked", (d.rec.Now() - faulted).Round(time.Millisecond))
		}
		d.Notef("the workload was granted %d sets while masters 1 and 2 were out (%v, from their restart until every client counted them again) and %d in the %v after",
			during, (healed - faulted).Round(time.Millisecond), after, (d.rec.Now() - healed).Round(time.Millisecond))
		return nil
	}
	return sc
}

// setHolder is client A of an arranged multi-key row.
type setHolder struct {
	s      setGrant
	client int
}

// placeSetOnly is placeOnly for a set: client A (the library client of
// view a) takes keys as one lock for ttl on the masters in on only. Before
// A asks, every master not in on holds each key of the set for a
// placeholder token, so its script refuses the whole set; once A holds the
// lock (checked key by key on every master of on, released and taken again
// where a SET did not arrive) the placeholders are deleted. A writes
// "begin" for every key at once.
func placeSetOnly(ctx context.Context, d *Drill, dm direct, keys []string, ttl time.Duration, on []int) (setHolder, error) {
	a := setHolder{client: d.NewClientID()}
	var off []int
	var names []string
	for m := range d.T.Masters() {
		if !slices.Contains(on, m) {
			off = append(off, m)
			names = append(names, fmt.Sprint(m))
		}
	}
	placeholder, err := redlock.RandomToken()
	if err != nil {
		return setHolder{}, err
	}
	space := d.T.Space()
	if err := eachMaster(ctx, off, func(ctx context.Context, m int) error {
		for _, k := range keys {
			if err := dm[m].Set(ctx, space.LockKey(k), placeholder, 30*time.Second).Err(); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return setHolder{}, fmt.Errorf("arrangement failed: the placeholders on masters %s: %w", strings.Join(names, ","), err)
	}
	unplace := func(ctx context.Context) error {
		return eachMaster(ctx, off, func(ctx context.Context, m int) error {
			for _, k := range keys {
				if err := delIfEqual.Run(ctx, dm[m], []string{space.LockKey(k)}, placeholder).Err(); err != nil {
					return err
				}
			}
			return nil
		})
	}
	placed := false
	defer func() {
		if !placed { // the arrangement failed: leave no placeholder behind (I4)
			_ = unplace(context.WithoutCancel(ctx))
		}
	}()
	// With two masters refusing, every one of on must answer A within the
	// per-master timeout: on a loaded machine an attempt, or a 2s wait of
	// attempts, may fail, so A tries for up to 8s.
	deadline := time.Now().Add(8 * time.Second)
	for {
		var err error
		a.s, err = d.AcquireSet(ctx, d.Lib(0), a.client, keys, ttl, 2*time.Second)
		if err != nil {
			if time.Now().Before(deadline) && ctx.Err() == nil {
				d.Notef("A could not acquire %v on masters %v (slow machine), tries again: %v", keys, on, err)
				continue
			}
			return setHolder{}, fmt.Errorf("arrangement failed: A could not acquire %v: %w", keys, err)
		}
		// A set's commands travel on the lane of its first key.
		if err := settle(ctx, d, keys[0], deadline); err != nil {
			return setHolder{}, err
		}
		missing := ""
		for _, m := range on {
			for _, k := range keys {
				if v, err := dm[m].Get(ctx, space.LockKey(k)).Result(); err != nil || v != a.s.g.token {
					missing = fmt.Sprintf("%s on master %d", k, m)
					break
				}
			}
			if missing != "" {
				break
			}
		}
		if missing == "" {
			break
		}
		d.Notef("A's set did not reach %s (slow machine): released and acquired again", missing)
		_ = d.ReleaseSet(ctx, d.Lib(0), a.client, a.s)
		if time.Now().After(deadline) {
			return setHolder{}, fmt.Errorf("arrangement failed: A's set %v never reached every master of %v in 8s", keys, on)
		}
	}
	d.WriteSet(a.s, a.client, "begin")
	what := fmt.Sprintf("A's set lost on its way to masters %s (placeholders refused it there; now deleted)", strings.Join(names, ","))
	// Not an availability fault: those masters answer and vote.
	placed = true
	return a, d.Mark(ctx, what, unplace)
}

// contendSetVia is contendVia for sets: the contenders try keys as one
// lock in turn, single attempts about 10ms apart, until A's validity has
// ended (plus a margin); the first grant writes, commits and releases, and
// ends the contest. Meanwhile A commits every key of its set just before
// its validity ends and lets its lock expire. Whether a contender was
// granted while A's lease ran is for the checker (I1) to say.
func contendSetVia(ctx context.Context, d *Drill, keys []string, ttl time.Duration, a setHolder, contenders ...locker) error {
	done := make(chan error, 1)
	go func() {
		err := d.Sleep(ctx, time.Until(a.s.g.validUntil)-50*time.Millisecond)
		if err == nil && time.Now().Before(a.s.g.validUntil) {
			d.WriteSet(a.s, a.client, "commit")
		}
		done <- err
	}()
	clients := make([]int, len(contenders))
	for i := range clients {
		clients[i] = d.NewClientID()
	}
	var err error
	for i := 0; time.Now().Before(a.s.g.validUntil.Add(100 * time.Millisecond)); i++ {
		b, client := contenders[i%len(contenders)], clients[i%len(contenders)]
		s, aerr := d.AcquireSet(ctx, b, client, keys, ttl, 0)
		if aerr == nil {
			d.WriteSet(s, client, "begin")
			d.WriteSet(s, client, "commit")
			_ = d.ReleaseSet(ctx, b, client, s)
			break
		}
		if err = d.Sleep(ctx, 10*time.Millisecond); err != nil {
			break
		}
	}
	return errors.Join(err, <-done)
}
