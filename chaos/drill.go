package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// Config is the shape of a drill run: timing of the workload and of the
// library clients, contention, and the allowances of the checker.
type Config struct {
	// Duration of each workload scenario; the fault is in force over its
	// middle half. Default 4s; at least 3×TTL so pauses outlast the TTL.
	Duration time.Duration
	// TTL of the workload's locks; whole seconds (the HTTP API's unit).
	// Default 1s.
	TTL time.Duration
	// Clients and Keys: M clients contend for K keys. Default 6 and 3.
	Clients, Keys int
	// Via: "mixed" (default: clients alternate between the library and
	// the daemons' HTTP API, over every view), "lib" or "http".
	Via string
	// Client is the timing of the drill's own library clients; it should
	// match the daemons' (the ProcessTarget defaults do).
	Client DaemonConfig
	// Slack is what a loaded machine may add to any call's bound (I3).
	// Default 1s.
	Slack time.Duration
	// FastSlack is what it may add to a failure that should be fast
	// because no quorum is possible (I6). Default 300ms.
	FastSlack time.Duration
	// Seed makes the workload's and the random mix's choices repeatable.
	Seed uint64
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
}

func (c Config) withDefaults() Config {
	if c.Duration == 0 {
		c.Duration = 4 * time.Second
	}
	if c.TTL == 0 {
		c.TTL = time.Second
	}
	c.TTL = max(c.TTL.Truncate(time.Second), time.Second)
	if c.Clients == 0 {
		c.Clients = 6
	}
	if c.Keys == 0 {
		c.Keys = 3
	}
	if c.Via == "" {
		c.Via = "mixed"
	}
	c.Client = c.Client.withDefaults()
	if c.Slack == 0 {
		c.Slack = time.Second
	}
	if c.FastSlack == 0 {
		c.FastSlack = 300 * time.Millisecond
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c
}

// Drill is one scenario running against a Target: the drill's own library
// clients (one per view, with the scenario's options), HTTP clients of the
// daemons (through front proxies that can hold the daemons' replies), the
// Recorder and the Resource. Scenario scripts drive it.
type Drill struct {
	T   Target
	Cfg Config
	Sc  *Scenario

	rec *Recorder
	res *Resource
	// clientsMu guards clients: replaceClients swaps them while the
	// workload and the watcher run.
	clientsMu sync.RWMutex
	clients   [][]*redlock.Client // per view, per master group
	groups    [][]int             // the masters of each group (one group unless MasterGrouper says more)
	place     *redlock.Placement  // of lock keys over groupName(0..): with more than one group
	libs      []locker            // per view: *libLocker, the same for the whole run
	https     []locker            // per daemon
	fronts    []*Proxy            // per daemon
	viewsMu   sync.RWMutex
	views     map[string]int // locker name → view
	hc        *http.Client

	rngMu sync.Mutex
	rng   *rand.Rand // the workload's choices
	// Script is the scripts' own random source, apart from the workload's
	// so that a seed repeats the same faults. Scripts run in one goroutine.
	Script *rand.Rand

	nextClient atomic.Int64
	probeSeq   atomic.Int64
	groupSeq   atomic.Int64
	maxTTL     atomic.Int64 // longest TTL any call used, for the sweep

	expectStale atomic.Int64
	// unrecoverable: masters lost their data beyond repair (see settle).
	unrecoverable atomic.Bool
	notesMu       sync.Mutex
	notes         []string
}

func newDrill(ctx context.Context, t Target, cfg Config, sc *Scenario) (*Drill, error) {
	d := &Drill{
		T: t, Cfg: cfg, Sc: sc,
		rec:    NewRecorder(),
		views:  map[string]int{},
		rng:    rand.New(rand.NewPCG(cfg.Seed, 1)),
		Script: rand.New(rand.NewPCG(cfg.Seed, 2)),
		hc: &http.Client{
			Timeout:   60 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
		},
	}
	d.res = NewResource(d.rec)
	d.nextClient.Store(int64(cfg.Clients))
	d.maxTTL.Store(int64(cfg.TTL))
	ok := false
	defer func() {
		if !ok {
			d.close()
		}
	}()
	space := t.Space()
	d.groups = masterGroups(t)
	if len(d.groups) > 1 {
		var err error
		if d.place, err = redlock.NewPlacement(groupNames(len(d.groups))...); err != nil {
			return nil, err
		}
	}
	for v := range t.Views() {
		p, err := d.newLibPath(v)
		if err != nil {
			return nil, err
		}
		d.clients = append(d.clients, p.clients)
		l := newLibLocker(fmt.Sprintf("lib/%c", 'a'+v), p, space, cfg.Client.PerMasterTimeout)
		d.libs = append(d.libs, l)
		d.views[l.name] = v
	}
	for _, dm := range t.Daemons() {
		u, err := url.Parse(dm.URL)
		if err != nil {
			return nil, fmt.Errorf("chaos: daemon %s: %w", dm.Name, err)
		}
		front, err := NewStaticProxy(u.Host)
		if err != nil {
			return nil, err
		}
		d.fronts = append(d.fronts, front)
		l := &httpLocker{name: "http/" + dm.Name, url: "http://" + front.Addr(), apiKey: dm.APIKey, ns: space.Namespace, pmt: dm.PerMasterTimeout, hc: d.hc}
		d.https = append(d.https, l)
		d.views[l.name] = dm.View
	}
	// Every library client has probed every master (and learned its
	// run_id) before any fault: a restart is then seen as one.
	for _, c := range d.libClients() {
		for {
			probed := true
			for _, st := range c.Masters() {
				probed = probed && !st.CheckedAt.IsZero() && st.Counting
			}
			if probed {
				break
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	// Warm up every locker (lane connections dialed, scripts loaded, HTTP
	// connections open) so that a slow first call on a loaded machine is
	// not mistaken for a fault.
	for _, l := range append(slices.Clone(d.libs), d.https...) {
		if err := warmUp(ctx, l, cfg.TTL); err != nil {
			return nil, fmt.Errorf("chaos: warm-up through %s: %w", l.Name(), err)
		}
	}
	ok = true
	return d, nil
}

func warmUp(ctx context.Context, l locker, ttl time.Duration) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		g, err := l.Acquire(ctx, acquireArgs{key: "warm-up:" + l.Name(), ttl: ttl})
		if err == nil {
			return l.Release(ctx, g)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *Drill) close() {
	for _, c := range d.libClients() {
		_ = c.Close()
	}
	for _, f := range d.fronts {
		_ = f.Close()
	}
	d.hc.CloseIdleConnections()
}

// Logf logs a progress line.
func (d *Drill) Logf(format string, args ...any) {
	d.Cfg.Logf("  [%s %6.2fs] "+format, append([]any{d.Sc.Name, d.rec.Now().Seconds()}, args...)...)
}

// Notef adds a line to the scenario's report.
func (d *Drill) Notef(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	d.notesMu.Lock()
	d.notes = append(d.notes, s)
	d.notesMu.Unlock()
	d.rec.Note(s)
	d.Logf("%s", s)
}

// Sleep waits for dur or until ctx ends.
func (d *Drill) Sleep(ctx context.Context, dur time.Duration) error {
	if dur <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// SleepUntil waits until the drill clock reads at.
//
// A step that starts late by more than an eighth of the duration (a slow
// warm-up, fault or heal on a loaded machine) gets a note: the row ran
// with a shorter fault window or recovery period than planned, so it gives
// less evidence than its duration suggests.
func (d *Drill) SleepUntil(ctx context.Context, at time.Duration) error {
	if late := d.rec.Now() - at; late > d.Cfg.Duration/8 && late > 250*time.Millisecond {
		d.Notef("a step scheduled at %v started %v late (slow machine): this row's fault window or recovery period was shorter than planned", at.Round(time.Millisecond), late.Round(time.Millisecond))
	}
	return d.Sleep(ctx, at-d.rec.Now())
}

// Lib returns the library locker of view v.
func (d *Drill) Lib(v int) locker { return d.libs[v] }

// Client returns the drill's library client of view v (the one now: see
// replaceClients); with master groups, the first group's.
func (d *Drill) Client(v int) *redlock.Client {
	d.clientsMu.RLock()
	defer d.clientsMu.RUnlock()
	return d.clients[v][0]
}

// libClients returns the drill's library clients now, every group's of
// every view.
func (d *Drill) libClients() []*redlock.Client {
	d.clientsMu.RLock()
	defer d.clientsMu.RUnlock()
	var out []*redlock.Client
	for _, cs := range d.clients {
		out = append(out, cs...)
	}
	return out
}

// viewMasters returns every master's status as view v's library clients
// see it now, in the target's master order (group after group).
func (d *Drill) viewMasters(v int) []redlock.MasterStatus {
	d.clientsMu.RLock()
	cs := slices.Clone(d.clients[v])
	d.clientsMu.RUnlock()
	var out []redlock.MasterStatus
	for _, c := range cs {
		out = append(out, c.Masters()...)
	}
	return out
}

// newLibPath makes view v's library clients, one per master group, with
// the run's options and no earlier reading of any master, and the route
// over them: the Client itself, or a redlock.Groups.
func (d *Drill) newLibPath(v int) (*libPath, error) {
	addrs := d.T.MasterAddrs(v)
	p := &libPath{}
	var gs []redlock.Group
	for gi, ms := range d.groups {
		var ga []string
		for _, m := range ms {
			ga = append(ga, addrs[m])
		}
		c, err := newClient(ga, d.Cfg.Client.clientOptions(d.T.Space(), d.Sc.Options...))
		if err != nil {
			for _, c := range p.clients {
				_ = c.Close()
			}
			return nil, err
		}
		p.clients = append(p.clients, c)
		gs = append(gs, redlock.Group{Name: groupName(gi), Client: c})
	}
	if len(gs) == 1 {
		p.route = plainRoute{p.clients[0]}
		return p, nil
	}
	// Not closed through the Groups: the clients are closed one by one.
	router, err := redlock.NewGroups(gs...)
	if err != nil {
		for _, c := range p.clients {
			_ = c.Close()
		}
		return nil, err
	}
	p.route = plainRoute{router}
	return p, nil
}

// closeClients closes the drill's library clients: from now on they watch
// no master (no health probe, no vote) until replaceClients. Calls through
// them fail with redlock.ErrClosed meanwhile.
func (d *Drill) closeClients(context.Context) error {
	for _, c := range d.libClients() {
		_ = c.Close()
	}
	return nil
}

// replaceClients gives every view a new library client, with the run's
// options and no earlier reading of any master, and closes the old ones.
// The lockers of Lib keep their names and views and switch to the new
// clients at once; a call already running finishes on the old client. It
// returns once every new client has probed every master once.
func (d *Drill) replaceClients(ctx context.Context) error {
	var fresh []*libPath
	for v := range d.T.Views() {
		p, err := d.newLibPath(v)
		if err != nil {
			for _, p := range fresh {
				for _, c := range p.clients {
					_ = c.Close()
				}
			}
			return err
		}
		fresh = append(fresh, p)
	}
	old := d.libClients()
	d.clientsMu.Lock()
	for v, l := range d.libs {
		d.clients[v] = fresh[v].clients
		l.(*libLocker).cur.Store(fresh[v])
	}
	d.clientsMu.Unlock()
	for _, c := range old {
		_ = c.Close()
	}
	for _, c := range d.libClients() {
		for {
			probed := true
			for _, st := range c.Masters() {
				probed = probed && !st.CheckedAt.IsZero()
			}
			if probed {
				break
			}
			if err := d.Sleep(ctx, 10*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// HTTP returns the HTTP locker of daemon i, or nil.
func (d *Drill) HTTP(i int) locker {
	if i < len(d.https) {
		return d.https[i]
	}
	return nil
}

// Front returns the front proxy of daemon i (HoldReplies freezes its
// answers).
func (d *Drill) Front(i int) *Proxy { return d.fronts[i] }

// ExpectStaleRejections says the scenario must see at least n writes
// rejected by the Resource as stale.
func (d *Drill) ExpectStaleRejections(n int) { d.expectStale.Add(int64(n)) }

// NewClientID returns a client number no workload client uses.
func (d *Drill) NewClientID() int { return int(d.nextClient.Add(1) - 1) }

// Fault applies fn to every master in masters at once, as one fault seen
// by view (or AllViews), and records it.
func (d *Drill) Fault(ctx context.Context, what string, view int, masters []int, fn func(ctx context.Context, m int) error) error {
	at := d.rec.Now()
	err := eachMaster(ctx, masters, fn)
	done := d.rec.Now()
	d.rec.Faulted(what, view, at, done, masters...)
	d.Logf("fault: %s (%v)", what, (done - at).Round(time.Millisecond))
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Mark applies fn and records it as a fault that breaks no master's
// availability (a clock running fast), so I5 and I6 do not count it.
func (d *Drill) Mark(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	at := d.rec.Now()
	err := fn(ctx)
	done := d.rec.Now()
	d.rec.Faulted(what, AllViews, at, done)
	d.Logf("fault: %s (%v)", what, (done - at).Round(time.Millisecond))
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Unmark applies fn and records it as the end of a Mark.
func (d *Drill) Unmark(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	at := d.rec.Now()
	err := fn(ctx)
	done := d.rec.Now()
	d.rec.Healing(what, AllViews, at, done)
	d.Logf("heal: %s (%v)", what, (done - at).Round(time.Millisecond))
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Heal applies fn to every master in masters at once, records it, and
// waits (bounded) until every client counts them again.
func (d *Drill) Heal(ctx context.Context, what string, view int, masters []int, fn func(ctx context.Context, m int) error) error {
	at := d.rec.Now()
	var err error
	if fn != nil {
		err = eachMaster(ctx, masters, fn)
	}
	done := d.rec.Now()
	d.rec.Healing(what, view, at, done, masters...)
	d.Logf("heal: %s (%v)", what, (done - at).Round(time.Millisecond))
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return d.settle(ctx, view, masters)
}

// Lift applies fn to every master in masters at once and records it as a
// heal, without waiting for the clients to count the masters again (an
// arrangement whose clock is running cannot wait).
func (d *Drill) Lift(ctx context.Context, what string, view int, masters []int, fn func(ctx context.Context, m int) error) error {
	at := d.rec.Now()
	err := eachMaster(ctx, masters, fn)
	done := d.rec.Now()
	d.rec.Healing(what, view, at, done, masters...)
	d.rec.Settled(done, view, masters...) // not waited for: I5 is not judged in arrangements
	d.Logf("heal: %s (%v)", what, (done - at).Round(time.Millisecond))
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// settle waits until the drill's clients and the target's daemons count
// masters again, at most the quarantine length plus a few probe rounds,
// and records when. A master that does not come back is noted, not an
// error: after three masters lost their data, none can be repaired.
func (d *Drill) settle(ctx context.Context, view int, masters []int) error {
	limit := d.Cfg.Client.MaxTTL + 20*d.Cfg.Client.HealthInterval + 3*time.Second
	deadline := time.Now().Add(limit)
	for {
		counting, err := d.counting(ctx)
		if err == nil {
			all := true
			for _, m := range masters {
				all = all && counting[m]
			}
			if all {
				d.rec.Settled(d.rec.Now(), view, masters...)
				d.Logf("settled: masters %v counting again", masters)
				return nil
			}
		}
		if time.Now().After(deadline) {
			d.Notef("masters %v not counting again %v after the heal (%v)", masters, limit, errOr(err, "quarantined or awaiting a fencing repair"))
			return nil
		}
		if d.unrepairable(masters) {
			d.unrecoverable.Store(true)
			d.Notef("masters %v lost their data and cannot be repaired: their fencing counters can only be repaired from a quorum of counting masters, and fewer remain (by design: the fencing proof needs at most N-quorum masters to lose data; the daemons fail closed until an operator runs redlockd repair-fences)", masters)
			return nil
		}
		if err := d.Sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// unrepairable reports whether, for the drill's first view, the group of
// one of the masters given has fewer than a quorum of masters counting and
// none of its masters given is down for another reason than awaiting a
// fencing repair: the repair reads from a quorum of counting masters, so
// it never happens.
func (d *Drill) unrepairable(masters []int) bool {
	sts := d.viewMasters(0)
	for _, group := range d.groups {
		counting, given, awaiting := 0, 0, true
		for _, m := range group {
			if sts[m].Counting {
				counting++
			}
			if slices.Contains(masters, m) {
				given++
				awaiting = awaiting && (sts[m].Counting || sts[m].State == redlock.MasterRepairing)
			}
		}
		if given > 0 && awaiting && counting < len(group)/2+1 {
			return true
		}
	}
	return false
}

func errOr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}

// counting reports, per master, whether every drill client and every
// daemon counts its vote now.
func (d *Drill) counting(ctx context.Context) ([]bool, error) {
	n := d.T.Masters()
	out := make([]bool, n)
	for i := range out {
		out[i] = true
	}
	for v := range d.libs {
		for i, st := range d.viewMasters(v) {
			out[i] = out[i] && st.Counting
		}
	}
	if tc, ok := d.T.(interface {
		Counting(context.Context) ([]bool, error)
	}); ok {
		dc, err := tc.Counting(ctx)
		if err != nil {
			return nil, err
		}
		for i := range out {
			out[i] = out[i] && dc[i]
		}
	}
	return out, nil
}

func eachMaster(ctx context.Context, masters []int, fn func(ctx context.Context, m int) error) error {
	errs := make([]error, len(masters))
	var wg sync.WaitGroup
	for i, m := range masters {
		wg.Go(func() { errs[i] = fn(ctx, m) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// viewOf returns the view of a locker.
func (d *Drill) viewOf(l locker) int {
	d.viewsMu.RLock()
	defer d.viewsMu.RUnlock()
	return d.views[l.Name()]
}

// setView records the view of a locker added while the workload runs.
func (d *Drill) setView(name string, v int) {
	d.viewsMu.Lock()
	defer d.viewsMu.Unlock()
	d.views[name] = v
}

// Acquire takes key through l for client, records the call and returns the
// grant with its Op ID. wait 0 means a single attempt.
func (d *Drill) Acquire(ctx context.Context, l locker, client int, key string, ttl, wait time.Duration) (grant, int, error) {
	return d.acquire(ctx, l, client, acquireArgs{key: key, ttl: ttl, wait: wait}, false, 0)
}

// AcquireWith is Acquire with every argument of the call: a lock-delay, or
// a semaphore's permit (the Op's Key is then the slot lock's,
// redlock.PermitKey(name, slot), once granted).
func (d *Drill) AcquireWith(ctx context.Context, l locker, client int, a acquireArgs) (grant, int, error) {
	return d.acquire(ctx, l, client, a, false, 0)
}

func (d *Drill) acquire(ctx context.Context, l locker, client int, a acquireArgs, probe bool, group int) (grant, int, error) {
	if held := a.ttl + a.lockDelay; int64(held) > d.maxTTL.Load() {
		d.maxTTL.Store(int64(held))
	}
	op := Op{
		Client: client, Via: l.Name(), View: d.viewOf(l), Kind: "acquire", Key: a.key, Probe: probe, Group: group, TTL: a.ttl,
		LockDelay: a.lockDelay, Permits: a.permits,
		Bound: a.wait + 3*l.PerMasterTimeout() + d.Cfg.Slack, PMT: l.PerMasterTimeout(),
	}
	if a.permits > 0 {
		op.Semaphore = a.key
		// An attempt tries every held slot once.
		op.Bound += time.Duration(a.permits-1) * l.PerMasterTimeout()
	}
	// Calls run to their own end: a drill that stops cancels no call, so
	// every call is judged by its own bound. The timeout only stops a hang.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), op.Bound+30*time.Second)
	defer cancel()
	op.Invoke = d.rec.Now()
	g, err := l.Acquire(cctx, a)
	op.Return = d.rec.Now()
	if err != nil {
		op.Outcome, op.Err = outcomeOf(err), err.Error()
	} else {
		op.OK, op.Fence, op.ValidUntil, op.Key = true, g.fence, d.rec.At(g.validUntil), g.historyKey()
	}
	return g, d.rec.Add(op), err
}

// Release releases the grant whose acquire Op is id and records the call.
// key is the lock's key (a permit is recorded under its slot lock's).
func (d *Drill) Release(ctx context.Context, l locker, client int, key string, g grant, id int) error {
	if g.permits > 0 {
		key = g.historyKey()
	}
	op := Op{Client: client, Via: l.Name(), View: d.viewOf(l), Kind: "release", Key: key, Grant: id, Bound: l.PerMasterTimeout() + d.Cfg.Slack, PMT: l.PerMasterTimeout()}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), op.Bound+30*time.Second)
	defer cancel()
	op.Invoke = d.rec.Now()
	err := l.Release(cctx, g)
	op.Return = d.rec.Now()
	op.OK = err == nil
	if err != nil {
		op.Outcome, op.Err = outcomeOf(err), err.Error()
	}
	d.rec.Add(op)
	return err
}

// Status asks l whether the lock key is held and records the call (I9).
// Like a release, it waits for every master's answer or its per-master
// timeout.
func (d *Drill) Status(ctx context.Context, l locker, client int, key string) (bool, error) {
	op := Op{Client: client, Via: l.Name(), View: d.viewOf(l), Kind: "status", Key: key, Bound: l.PerMasterTimeout() + d.Cfg.Slack, PMT: l.PerMasterTimeout()}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), op.Bound+30*time.Second)
	defer cancel()
	op.Invoke = d.rec.Now()
	held, err := l.Status(cctx, key)
	op.Return = d.rec.Now()
	op.OK, op.Held = err == nil, held
	if err != nil {
		op.Outcome, op.Err = outcomeOf(err), err.Error()
	}
	d.rec.Add(op)
	return held, err
}

// Extend extends, through the library client of view v, the grant whose
// acquire Op is id to ttl from now, records the call, and returns the
// grant with its new validity.
func (d *Drill) Extend(ctx context.Context, v, client int, key string, g grant, id int, ttl time.Duration) (grant, error) {
	if int64(ttl) > d.maxTTL.Load() {
		d.maxTTL.Store(int64(ttl))
	}
	l := d.libs[v].(*libLocker)
	op := Op{Client: client, Via: l.Name(), View: v, Kind: "extend", Key: key, Grant: id, TTL: ttl, Bound: l.PerMasterTimeout() + d.Cfg.Slack, PMT: l.PerMasterTimeout()}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), op.Bound+30*time.Second)
	defer cancel()
	op.Invoke = d.rec.Now()
	validUntil, err := l.cur.Load().route.extend(cctx, l.space.LockKey(key), g.token, ttl)
	op.Return = d.rec.Now()
	if err != nil {
		op.Outcome, op.Err = outcomeOf(err), err.Error()
		d.rec.Add(op)
		return g, err
	}
	op.OK, op.Fence, op.ValidUntil = true, g.fence, d.rec.At(validUntil)
	d.rec.Add(op)
	g.validUntil = validUntil
	return g, nil
}

// Write writes phase to the Resource under the grant.
func (d *Drill) Write(key string, g grant, client, id int, phase string) bool {
	return d.res.Write(key, g.fence, client, id, phase)
}

// Excuse marks Op id as delayed on purpose by a fault (exempt from I3).
func (d *Drill) Excuse(id int) { d.rec.Excuse(id) }

func (d *Drill) intN(n int) int {
	d.rngMu.Lock()
	defer d.rngMu.Unlock()
	return d.rng.IntN(n)
}

func (d *Drill) jitter(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(d.intN(int(hi-lo)))
}
