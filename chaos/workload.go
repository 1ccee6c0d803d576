package chaos

// The drill's background activity: the contention workload, the probes
// of I5/I6, the watcher of master states and the PING monitor of stalls.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/redlock"
)

// workloadLockers is who the workload clients go through, by Config.Via.
func (d *Drill) workloadLockers() []locker {
	switch d.Cfg.Via {
	case "lib":
		return d.libs
	case "http":
		if len(d.https) > 0 {
			return d.https
		}
		return d.libs
	}
	// mixed: interleave so that neighbours differ in transport and view.
	var out []locker
	for i := range max(len(d.libs), len(d.https)) {
		if i < len(d.libs) {
			out = append(out, d.libs[i])
		}
		if i < len(d.https) {
			out = append(out, d.https[i])
		}
	}
	return out
}

// runWorkload runs the contention workload until stop is closed: Clients
// clients, each in a loop: pick one of Keys keys, acquire it (retrying up
// to one TTL), write "begin" to the Resource, work for a few ms, write
// "commit" if the lock is still valid, release (Scenario.MultiKey: a set
// of keys, setClient). In a semaphore row (Scenario.Permits) every client
// takes a permit of the one semaphore "sem" instead, and writes under its
// slot lock's key. Then the same for probes:
// every 150ms, each locker takes a fresh key nobody contends for.
func (d *Drill) runWorkload(ctx context.Context, stop <-chan struct{}, probes bool) *sync.WaitGroup {
	var wg sync.WaitGroup
	lockers := d.workloadLockers()
	for i := range d.Cfg.Clients {
		l := lockers[i%len(lockers)]
		if d.Sc.MultiKey {
			wg.Go(func() { d.setClient(ctx, stop, l, i) })
			continue
		}
		wg.Go(func() { d.client(ctx, stop, l, i) })
	}
	if probes {
		for _, l := range append(slices.Clone(d.libs), d.https...) {
			wg.Go(func() { d.prober(ctx, stop, l) })
		}
	}
	return &wg
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

func (d *Drill) client(ctx context.Context, stop <-chan struct{}, l locker, id int) {
	ttl := d.Cfg.TTL
	for !stopped(stop) && ctx.Err() == nil {
		a := acquireArgs{key: workloadKey(d.intN(d.Cfg.Keys)), ttl: ttl, wait: ttl}
		if d.Sc.Permits > 0 {
			a.key, a.permits = "sem", d.Sc.Permits
		}
		g, op, err := d.AcquireWith(ctx, l, id, a)
		if err == nil {
			key := g.historyKey()
			if d.Write(key, g, id, op, "begin") {
				_ = d.Sleep(ctx, d.jitter(5*time.Millisecond, 30*time.Millisecond))
				// A careful client commits only within validity; the
				// fence protects the resource if its clock lies.
				if time.Now().Before(g.validUntil) {
					d.Write(key, g, id, op, "commit")
				}
			}
			_ = d.Release(ctx, l, id, a.key, g, op)
		}
		_ = d.Sleep(ctx, d.jitter(0, 20*time.Millisecond))
	}
}

// watch notes every change of a master's state as the drill's library
// clients see it (down, quarantined and why, repairing), so the report
// says why a master did not count, until stop is closed.
func (d *Drill) watch(stop <-chan struct{}) {
	last := make([][]redlock.MasterState, len(d.libs))
	for !stopped(stop) {
		for v := range d.libs {
			sts := d.viewMasters(v)
			if last[v] == nil {
				last[v] = make([]redlock.MasterState, len(sts))
				for i, st := range sts {
					last[v][i] = st.State
				}
			}
			for i, st := range sts {
				if st.State == last[v][i] {
					continue
				}
				why := ""
				switch st.State {
				case redlock.MasterQuarantined, redlock.MasterRepairing:
					why = ": " + st.QuarantineReason
				case redlock.MasterDown:
					why = ": " + st.LastError
				}
				d.rec.Note(fmt.Sprintf("%s sees master %d %s → %s%s", d.libs[v].Name(), i, last[v][i], st.State, why))
				last[v][i] = st.State
			}
		}
		select {
		case <-stop:
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// monitor PINGs every master directly (past the proxies) every 50ms until
// stop is closed, and records as a stall every PING not answered within
// the shortest per-master timeout of any client (the daemons' or the
// drill's own): a master that cannot answer in time cannot vote in time, whatever the cause — an injected fault, or the machine freezing
// a container or a process on its own. I5 counts stalled masters as
// faulty; the report lists the stalls no injected fault explains.
func (d *Drill) monitor(stop <-chan struct{}) {
	var wg sync.WaitGroup
	// The tightest per-master timeout of any client: the daemons' may be
	// shorter than the drill's own library clients'.
	pmt := d.Cfg.Client.PerMasterTimeout
	for _, l := range d.https {
		pmt = min(pmt, l.PerMasterTimeout())
	}
	for m := range d.T.Masters() {
		wg.Go(func() {
			var rdb *redis.Client
			var resolved time.Time
			defer func() {
				if rdb != nil {
					_ = rdb.Close()
				}
			}()
			for !stopped(stop) {
				// A replaced container has a new address: look it up again
				// after a failure, at most twice a second.
				if rdb == nil && time.Since(resolved) > 500*time.Millisecond {
					resolved = time.Now()
					if addr := d.T.DirectAddrs()[m]; addr != "" {
						rdb = redis.NewClient(&redis.Options{
							Addr: addr, MaxRetries: -1, PoolSize: 1, DisableIdentity: true,
							DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
						})
					}
				}
				from := d.rec.Now()
				err := errors.New("no address")
				if rdb != nil {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					err = rdb.Ping(ctx).Err()
					cancel()
				}
				to := d.rec.Now()
				if err != nil || to-from > pmt {
					d.rec.Stalled(m, from, to)
				}
				if err != nil && rdb != nil {
					_ = rdb.Close()
					rdb = nil
				}
				select {
				case <-stop:
				case <-time.After(50 * time.Millisecond):
				}
			}
		})
	}
	wg.Wait()
}

// prober takes uncontended locks: for I5 (with at most N−quorum masters
// faulty they must succeed) and I6 (with more, they must fail, fast). A
// probe is single attempts 100ms apart for up to 1.5s (at least three): a
// healthy master on a loaded machine may miss a per-master timeout now
// and then, and Docker stalls a bridge network for a moment when a
// container is connected to it. Its attempts share a Group.
func (d *Drill) prober(ctx context.Context, stop <-chan struct{}, l locker) {
	client := d.NewClientID()
	for !stopped(stop) && ctx.Err() == nil {
		group := int(d.groupSeq.Add(1))
		giveUp := time.Now().Add(1500 * time.Millisecond)
		for attempt := 0; attempt < 3 || time.Now().Before(giveUp); attempt++ {
			key := fmt.Sprintf("probe:%d", d.probeSeq.Add(1))
			g, op, err := d.acquire(ctx, l, client, acquireArgs{key: key, ttl: d.Cfg.TTL}, true, group)
			if err == nil {
				_ = d.Release(ctx, l, client, key, g, op)
				break
			}
			if stopped(stop) || d.Sleep(ctx, 100*time.Millisecond) != nil || stopped(stop) {
				if attempt < 2 || time.Now().Before(giveUp) {
					// Cut short by the end of the row: not a probe I5
					// can judge (twice, at 9.99s of a 10s pause-3 row,
					// a probe's single failed attempt was reported).
					d.rec.Unfinished(op)
				}
				break
			}
		}
		_ = d.Sleep(ctx, d.jitter(100*time.Millisecond, 200*time.Millisecond))
	}
}
