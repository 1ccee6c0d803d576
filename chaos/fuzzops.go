package chaos

// The fault fuzzer's multi-key and semaphore operations (FuzzStep ops
// multi and permits, drawn by clientOps): holders that take overlapping
// sets of workload keys, or permits of the episode's semaphore, all at
// once through the paths the step names, while the episode's faults hold.
// Every call is recorded as the drill records the workload's (a set as
// one Op per key, a permit under its slot lock's key), so I1 and I2 judge
// each key and slot, across single-key and multi-key holders of a key,
// and I7 counts a semaphore's holders.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// fuzzOpWait is how long a multi's or permits' holder waits for its lock;
// fuzzOpHold how long it holds before and after its extend.
const (
	fuzzOpWait = 1500 * time.Millisecond
	fuzzOpHold = 100 * time.Millisecond
)

// stepLocker returns the locker of a multi's or permits' holder i for
// path via: view i%2's library client, view i%2's daemon (http), or the
// second daemon (other). A control that runs its workload through the
// library alone (FuzzControl.Via) keeps these to the library too.
func (fr *fuzzRunner) stepLocker(d *Drill, via string, i int) locker {
	if fr.fc.Control != nil && fr.fc.Control.Via == "lib" {
		via = "lib"
	}
	switch via {
	case "http":
		if h := d.HTTP(i % 2); h != nil {
			return h
		}
	case "other":
		if !fr.other.stopped() {
			l := &httpLocker{name: "http/c", url: fr.other.info.URL, apiKey: fr.other.info.APIKey, ns: d.T.Space().Namespace, pmt: fr.other.info.PerMasterTimeout, hc: d.hc}
			d.setView(l.Name(), fr.other.info.View)
			return l
		}
	}
	return d.Lib(i % 2)
}

// multiOp runs a multi step: one holder per set, all at once.
func (fr *fuzzRunner) multiOp(ctx context.Context, d *Drill, ep *episode, st FuzzStep) error {
	if len(st.Via) != len(st.Sets) {
		return fmt.Errorf("chaos: fuzz step %s: one path per set", st)
	}
	var wg sync.WaitGroup
	for i, keys := range st.Sets {
		l := fr.stepLocker(d, st.Via[i], i)
		wg.Go(func() { holdSet(ctx, d, ep.n, l, keys, st) })
	}
	wg.Wait()
	return nil
}

// holdSet takes keys as one lock through l (waiting up to fuzzOpWait),
// writes "begin" for every key, extends to st.ExtendTTL if asked, writes
// "commit" within validity and releases. A refusal or a failure under the
// episode's faults is logged: what the checker judges is the history.
func holdSet(ctx context.Context, d *Drill, e int, l locker, keys []string, st FuzzStep) {
	client := d.NewClientID()
	s, err := d.AcquireSet(ctx, l, client, keys, st.TTL, fuzzOpWait)
	if err != nil {
		d.Logf("e%d multi %v through %s: %v", e, keys, l.Name(), err)
		return
	}
	d.Logf("e%d multi %v through %s: granted, fence %d", e, keys, l.Name(), s.g.fence)
	if d.WriteSet(s, client, "begin") {
		_ = d.Sleep(ctx, fuzzOpHold)
		if st.ExtendTTL > 0 {
			g, ids, err := d.extendRecorded(ctx, l, client, s.g, s.keys, s.ids, st.ExtendTTL)
			s.g, s.ids = g, ids
			if err != nil {
				d.Logf("e%d multi %v through %s: extend to %v: %v", e, keys, l.Name(), st.ExtendTTL, err)
			}
			_ = d.Sleep(ctx, fuzzOpHold)
		}
		if time.Now().Before(s.g.validUntil) {
			d.WriteSet(s, client, "commit")
		}
	}
	_ = d.ReleaseSet(ctx, l, client, s)
}

// permitsOp runs a permits step: one holder per path, all at once, of the
// semaphore "fz<e>-sem" of st.Permits permits.
func (fr *fuzzRunner) permitsOp(ctx context.Context, d *Drill, ep *episode, st FuzzStep) error {
	if st.Permits <= 0 {
		return fmt.Errorf("chaos: fuzz step %s: needs permits", st)
	}
	name := ep.key + "-sem"
	var wg sync.WaitGroup
	for i, via := range st.Via {
		l := fr.stepLocker(d, via, i)
		wg.Go(func() { holdPermit(ctx, d, ep.n, l, name, st) })
	}
	wg.Wait()
	return nil
}

// holdPermit is holdSet for a permit of the semaphore name.
func holdPermit(ctx context.Context, d *Drill, e int, l locker, name string, st FuzzStep) {
	client := d.NewClientID()
	g, id, err := d.AcquireWith(ctx, l, client, acquireArgs{key: name, ttl: st.TTL, wait: fuzzOpWait, permits: st.Permits})
	if err != nil {
		d.Logf("e%d permit of %s through %s: %v", e, name, l.Name(), err)
		return
	}
	key := g.historyKey()
	d.Logf("e%d permit of %s through %s: slot %d, fence %d", e, name, l.Name(), g.slot, g.fence)
	if d.Write(key, g, client, id, "begin") {
		_ = d.Sleep(ctx, fuzzOpHold)
		if st.ExtendTTL > 0 {
			var ids []int
			g, ids, err = d.extendRecorded(ctx, l, client, g, []string{key}, []int{id}, st.ExtendTTL)
			id = ids[0]
			if err != nil {
				d.Logf("e%d permit %s through %s: extend to %v: %v", e, key, l.Name(), st.ExtendTTL, err)
			}
			_ = d.Sleep(ctx, fuzzOpHold)
		}
		if time.Now().Before(g.validUntil) {
			d.Write(key, g, client, id, "commit")
		}
	}
	_ = d.Release(ctx, l, client, name, g, id)
}

// extendRecorded extends, through l, the lock of g (a permit's slot lock,
// or, with more than one key, the set keys as one lock) to ttl from now,
// records the call as one extend Op per key (each naming its key's
// acquire Op, ids, as Drill.Extend does for one key), and returns the
// grant with its new validity and the acquire IDs unchanged. keys are the
// history's keys: a permit's slot lock's, or the set's.
func (d *Drill) extendRecorded(ctx context.Context, l locker, client int, g grant, keys []string, ids []int, ttl time.Duration) (grant, []int, error) {
	if int64(ttl) > d.maxTTL.Load() {
		d.maxTTL.Store(int64(ttl))
	}
	op := Op{Client: client, Via: l.Name(), View: d.viewOf(l), Kind: "extend", TTL: ttl, Bound: l.PerMasterTimeout() + d.Cfg.Slack, PMT: l.PerMasterTimeout()}
	if len(keys) > 1 {
		op.Set = keys
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), op.Bound+30*time.Second)
	defer cancel()
	op.Invoke = d.rec.Now()
	validUntil, err := extendThrough(cctx, l, g, op.Set, ttl)
	op.Return = d.rec.Now()
	if err != nil {
		op.Outcome, op.Err = outcomeOf(err), err.Error()
	} else {
		op.OK, op.Fence, op.ValidUntil = true, g.fence, d.rec.At(validUntil)
		g.validUntil = validUntil
	}
	for i, k := range keys {
		o := op
		o.Key, o.Grant = k, ids[i]
		d.rec.Add(o)
	}
	return g, ids, err
}

// extendThrough extends g's lock (set: the multi-key lock of those keys)
// through l to ttl from now and returns its new end of validity, never
// later than the truth.
func extendThrough(ctx context.Context, l locker, g grant, set []string, ttl time.Duration) (time.Time, error) {
	switch l := l.(type) {
	case *libLocker:
		if len(set) > 0 {
			lk, err := l.client().ExtendMulti(ctx, l.lockKeys(set), g.token, ttl)
			if err != nil {
				return time.Time{}, err
			}
			return lk.ValidUntil(), nil
		}
		if g.permits > 0 {
			lk, err := l.client().Extend(ctx, l.lockKey(g), g.token, ttl)
			if err != nil {
				return time.Time{}, err
			}
			return lk.ValidUntil(), nil
		}
		return l.cur.Load().route.extend(ctx, l.space.LockKey(g.key), g.token, ttl)
	case *httpLocker:
		sent := time.Now()
		body := map[string]any{"action": "extend", "token": g.token, "ttl": int64(ttl / time.Second)}
		switch {
		case len(set) > 0:
			body["keys"] = set
		case g.permits > 0:
			body["key"], body["slot"] = g.key, g.slot
		default:
			body["key"] = g.key
		}
		_, r, err := l.call(ctx, body)
		if err != nil {
			return time.Time{}, err
		}
		if !r.Data.Extended {
			return time.Time{}, &lockError{outcome: "not-held", err: errors.New(r.Msg)}
		}
		// As Acquire: validity counted from our send time.
		elapsed := min(time.Duration(r.Data.ElapsedMS)*time.Millisecond, time.Since(sent))
		return sent.Add(elapsed + time.Duration(r.Data.ValidityMS)*time.Millisecond), nil
	}
	return time.Time{}, fmt.Errorf("chaos: %s cannot extend", l.Name())
}
