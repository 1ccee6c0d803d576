package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/redlockd/redlockd/internal/clockshim"
	"github.com/redlockd/redlockd/internal/redisproc"
)

// ProcessOptions configures NewProcessTarget.
type ProcessOptions struct {
	// Masters is N, default 5: the masters of each group.
	Masters int
	// Groups is how many master groups of Masters masters each there are,
	// default 1. With more, the masters are numbered group after group,
	// and the daemons serve them as master_groups named g0, g1, … (keys
	// placed by redlock.Placement); see MasterGroups.
	Groups int
	// Views is how many views (each with its own proxy per master) there
	// are; default 2. A daemon serves each of the first Daemons views.
	Views int
	// Daemons is how many in-process daemons to start, on views 0..
	// Daemons-1; default 2 (a lock taken through one is released through
	// the other). Negative: none.
	Daemons int
	// Daemon configures them.
	Daemon DaemonConfig
	// ClockShim: start every master with the LD_PRELOAD clock shim, so that
	// ClockJump and ClockRate work. Needs a C compiler; without one the
	// target starts without the shim and Supports(FaultClock) is false.
	ClockShim bool
	// ShimDir caches the compiled shim (clockshim.Build's dir); "" for the
	// default under the temp dir.
	ShimDir string
	// RedisServer is the redis-server binary, default from PATH.
	RedisServer string
	// RedisArgs are added to every master's command line (e.g.
	// "--enable-debug-command", "local").
	RedisArgs []string
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
}

// ProcessTarget is a deployment of real redis-server processes on loopback,
// a Proxy per (view, master) for the network faults, an optional clock shim
// per master, and in-process daemons (package daemon over package redlock,
// wired as `redlockd serve` wires them) on loopback ports.
type ProcessTarget struct {
	opts    ProcessOptions
	dir     string
	servers []*redisproc.Server
	clocks  []*clockshim.Clock // nil entries without the shim
	proxies [][]*Proxy         // [view][master]
	daemons []*localDaemon
	space   KeySpace

	mu     sync.Mutex
	paused map[int]bool
	killed map[int]bool
	faults map[string]func(context.Context) error // undo functions of faults in force
}

// NewProcessTarget starts the masters, proxies and daemons. Close stops
// them all.
func NewProcessTarget(o ProcessOptions) (_ *ProcessTarget, err error) {
	if o.Masters == 0 {
		o.Masters = 5
	}
	if o.Groups == 0 {
		o.Groups = 1
	}
	if o.Views == 0 {
		o.Views = 2
	}
	if o.Daemons == 0 {
		o.Daemons = 2
	}
	o.Daemons = max(min(o.Daemons, o.Views), 0)
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	o.Daemon = o.Daemon.withDefaults()
	t := &ProcessTarget{
		opts:   o,
		space:  KeySpace{Prefix: "redlock:", Account: localAccount, Namespace: "chaos"},
		paused: map[int]bool{},
		killed: map[int]bool{},
		faults: map[string]func(context.Context) error{},
	}
	defer func() {
		if err != nil {
			_ = t.Close()
		}
	}()
	if t.dir, err = os.MkdirTemp("", "redlockd-chaos-"); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	var shim string
	if o.ClockShim {
		if shim, err = clockshim.Build(o.ShimDir); err != nil {
			o.Logf("chaos: no clock shim, clock faults disabled: %v", err)
			shim, err = "", nil
		}
	}
	n := o.Masters * o.Groups
	t.servers = make([]*redisproc.Server, n)
	t.clocks = make([]*clockshim.Clock, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		ro := redisproc.Options{Binary: o.RedisServer, ExtraArgs: o.RedisArgs}
		if shim != "" {
			clk, cerr := clockshim.NewClock(filepath.Join(t.dir, fmt.Sprintf("clock%d", i)))
			if cerr != nil {
				return nil, cerr
			}
			t.clocks[i] = clk
			ro.LDPreload, ro.Env = shim, clk.Env()
		}
		wg.Go(func() { t.servers[i], errs[i] = redisproc.Start(ro) })
	}
	wg.Wait()
	if err = errors.Join(errs...); err != nil {
		return nil, err
	}
	t.proxies = make([][]*Proxy, o.Views)
	for v := range o.Views {
		for _, s := range t.servers {
			p, perr := NewStaticProxy(s.Addr())
			if perr != nil {
				return nil, perr
			}
			t.proxies[v] = append(t.proxies[v], p)
		}
	}
	for v := range o.Daemons {
		d, derr := startGroupedDaemon(string(rune('a'+v)), v, t.groupAddrs(v), o.Daemon, "127.0.0.1:0")
		if derr != nil {
			return nil, derr
		}
		t.daemons = append(t.daemons, d)
	}
	o.Logf("chaos: local target: masters %v, %d views, %d daemons", t.DirectAddrs(), o.Views, len(t.daemons))
	return t, nil
}

// Name implements Target.
func (t *ProcessTarget) Name() string { return "local" }

// Masters implements Target.
func (t *ProcessTarget) Masters() int { return len(t.servers) }

// Views implements Target.
func (t *ProcessTarget) Views() int { return len(t.proxies) }

// Space implements Target.
func (t *ProcessTarget) Space() KeySpace { return t.space }

// MasterAddrs implements Target: the view's proxies.
func (t *ProcessTarget) MasterAddrs(view int) []string {
	out := make([]string, len(t.servers))
	for i, p := range t.proxies[view] {
		out[i] = p.Addr()
	}
	return out
}

// DirectAddrs implements Target: the redis-servers themselves.
func (t *ProcessTarget) DirectAddrs() []string {
	out := make([]string, len(t.servers))
	for i, s := range t.servers {
		out[i] = s.Addr()
	}
	return out
}

// Daemons implements Target.
func (t *ProcessTarget) Daemons() []Daemon {
	out := make([]Daemon, len(t.daemons))
	for i, d := range t.daemons {
		out[i] = d.info
	}
	return out
}

// Supports implements Target: everything, clock faults with the shim only.
func (t *ProcessTarget) Supports(kind FaultKind) bool {
	switch kind {
	case FaultClock:
		return t.clocks[0] != nil
	case FaultHoldReply:
		return len(t.daemons) > 0
	case FaultGroups:
		return t.opts.Groups > 1
	}
	return true
}

// Counting reports, per master, whether every daemon counts its vote now.
func (t *ProcessTarget) Counting(context.Context) ([]bool, error) {
	out := make([]bool, len(t.servers))
	for i := range out {
		out[i] = true
	}
	for _, d := range t.daemons {
		for i, st := range d.masters() {
			out[i] = out[i] && st.Counting
		}
	}
	return out, nil
}

// Ready implements Target.
func (t *ProcessTarget) Ready(ctx context.Context) error {
	for {
		ok := true
		for _, d := range t.daemons {
			if !d.quorumAvailable() {
				ok = false
			}
			for _, st := range d.masters() {
				ok = ok && st.Counting
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: local target not ready: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (t *ProcessTarget) check(m int) error {
	if m < 0 || m >= len(t.servers) {
		return fmt.Errorf("chaos: master %d out of range 0..%d", m, len(t.servers)-1)
	}
	return nil
}

// remember records the undo of a fault in force under name, for HealAll.
func (t *ProcessTarget) remember(name string, undo func(context.Context) error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if undo == nil {
		delete(t.faults, name)
	} else {
		t.faults[name] = undo
	}
}

// Kill implements Injector: SIGKILL.
func (t *ProcessTarget) Kill(_ context.Context, m int) error {
	if err := t.check(m); err != nil {
		return err
	}
	if err := t.servers[m].Kill(); err != nil {
		return err
	}
	t.remember(fmt.Sprintf("kill %d", m), func(ctx context.Context) error { return t.RestartEmpty(ctx, m) })
	return nil
}

// Pause implements Injector: SIGSTOP.
func (t *ProcessTarget) Pause(_ context.Context, m int) error {
	if err := t.check(m); err != nil {
		return err
	}
	if err := t.servers[m].Pause(); err != nil {
		return err
	}
	t.remember(fmt.Sprintf("pause %d", m), func(ctx context.Context) error { return t.Resume(ctx, m) })
	return nil
}

// Resume implements Injector: SIGCONT.
func (t *ProcessTarget) Resume(_ context.Context, m int) error {
	if err := t.check(m); err != nil {
		return err
	}
	t.remember(fmt.Sprintf("pause %d", m), nil)
	return t.servers[m].Resume()
}

// RestartEmpty implements Injector: SIGKILL if running, empty data dir,
// start on the same port.
func (t *ProcessTarget) RestartEmpty(_ context.Context, m int) error {
	if err := t.check(m); err != nil {
		return err
	}
	t.remember(fmt.Sprintf("kill %d", m), nil)
	t.remember(fmt.Sprintf("pause %d", m), nil)
	return t.servers[m].Restart()
}

func (t *ProcessTarget) eachView(view, m int, f func(p *Proxy)) {
	for v := range t.proxies {
		if view == AllViews || view == v {
			f(t.proxies[v][m])
		}
	}
}

// Latency implements Injector on every view's proxy to m.
func (t *ProcessTarget) Latency(_ context.Context, m int, d time.Duration) error {
	if err := t.check(m); err != nil {
		return err
	}
	t.eachView(AllViews, m, func(p *Proxy) { p.SetLatency(d) })
	var undo func(context.Context) error
	if d > 0 {
		undo = func(ctx context.Context) error { return t.Latency(ctx, m, 0) }
	}
	t.remember(fmt.Sprintf("latency %d", m), undo)
	return nil
}

// Blackhole implements Injector on every view's proxy to m.
func (t *ProcessTarget) Blackhole(_ context.Context, m int, on bool) error {
	if err := t.check(m); err != nil {
		return err
	}
	t.eachView(AllViews, m, func(p *Proxy) { p.SetBlackhole(on) })
	var undo func(context.Context) error
	if on {
		undo = func(ctx context.Context) error { return t.Blackhole(ctx, m, false) }
	}
	t.remember(fmt.Sprintf("blackhole %d", m), undo)
	return nil
}

// Reset implements Injector on every view's proxy to m.
func (t *ProcessTarget) Reset(_ context.Context, m int) error {
	if err := t.check(m); err != nil {
		return err
	}
	t.eachView(AllViews, m, func(p *Proxy) { p.Reset() })
	return nil
}

// Partition implements Injector: the view's proxies to m reject.
func (t *ProcessTarget) Partition(_ context.Context, view, m int, on bool) error {
	if err := t.check(m); err != nil {
		return err
	}
	if view != AllViews && (view < 0 || view >= len(t.proxies)) {
		return fmt.Errorf("chaos: view %d out of range", view)
	}
	t.eachView(view, m, func(p *Proxy) { p.SetReject(on) })
	var undo func(context.Context) error
	if on {
		undo = func(ctx context.Context) error { return t.Partition(ctx, view, m, false) }
	}
	t.remember(fmt.Sprintf("partition %d %d", view, m), undo)
	return nil
}

// ClockJump implements Injector through the shim's control file.
func (t *ProcessTarget) ClockJump(_ context.Context, m int, d time.Duration) error {
	if err := t.check(m); err != nil {
		return err
	}
	if t.clocks[m] == nil {
		return fmt.Errorf("%w: clock jump (no clock shim: no C compiler?)", ErrUnsupported)
	}
	if err := t.clocks[m].Jump(d); err != nil {
		return err
	}
	t.remember(fmt.Sprintf("clock %d", m), func(context.Context) error { return t.clocks[m].Reset() })
	return nil
}

// ClockRate implements Injector through the shim's control file.
func (t *ProcessTarget) ClockRate(_ context.Context, m int, rate float64) error {
	if err := t.check(m); err != nil {
		return err
	}
	if t.clocks[m] == nil {
		return fmt.Errorf("%w: clock rate (no clock shim: no C compiler?)", ErrUnsupported)
	}
	if err := t.clocks[m].SetRate(rate); err != nil {
		return err
	}
	t.remember(fmt.Sprintf("clock %d", m), func(context.Context) error { return t.clocks[m].Reset() })
	return nil
}

// HealAll implements Target.
func (t *ProcessTarget) HealAll(ctx context.Context) error {
	t.mu.Lock()
	undo := make([]func(context.Context) error, 0, len(t.faults))
	for _, f := range t.faults {
		undo = append(undo, f)
	}
	t.mu.Unlock()
	var errs []error
	for _, f := range undo {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}

// Close stops the daemons, proxies and masters and removes the temp dir.
func (t *ProcessTarget) Close() error {
	var errs []error
	for _, d := range t.daemons {
		errs = append(errs, d.close())
	}
	for _, ps := range t.proxies {
		for _, p := range ps {
			errs = append(errs, p.Close())
		}
	}
	errs = append(errs, redisproc.StopAll(t.servers))
	if t.dir != "" {
		errs = append(errs, os.RemoveAll(t.dir))
	}
	return errors.Join(errs...)
}
