package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRepairMargin is what RepairFences adds to the highest fencing
// counter it finds. The health loop copies the highest counter among the
// counting masters to every counting master each round, so the masters
// that kept their data lag the newest fence by the fences granted within
// about one health interval before the loss; the margin must exceed that.
const DefaultRepairMargin int64 = 1_000_000

// MaxFence is the largest fencing token redlockd issues: 2^53 − 1. The
// scripts compare counters as Lua numbers (doubles), exact only up to 2^53,
// and JSON clients in JavaScript read numbers as doubles too. RepairFences
// refuses a target within RepairHeadroom of it, and acquires refuse to
// issue a fence above it (ErrFenceExhausted); at one million grants a
// second, the counter takes 285 years to get there.
const MaxFence int64 = 1<<53 - 1

// RepairHeadroom is how many fences RepairFences leaves above its target:
// it refuses a target above MaxFence − RepairHeadroom. A repair that set
// the counters at or near MaxFence would leave the deployment no fences
// (acquires are refused past MaxFence: fail closed, ErrFenceExhausted);
// 2^40 is about 35 years of grants at a thousand a second, and the
// largest target, about 9.006e15, is far above any floor a resource has
// seen.
const RepairHeadroom int64 = 1 << 40

// maxRepairTarget is the largest target RepairFences writes.
const maxRepairTarget = MaxFence - RepairHeadroom

// RepairOptions configures RepairFences. The zero value uses the defaults.
type RepairOptions struct {
	// FenceKey and MarkerKey are the Client's (WithFenceKey,
	// WithMarkerKey); defaults "redlock:fence" and "redlock:marker".
	FenceKey, MarkerKey string
	// Margin is added to the highest counter found; 0 means
	// DefaultRepairMargin. At most MaxFence − RepairHeadroom.
	Margin int64
	// Min is a floor the operator knows, e.g. the highest fence the
	// protected resource has accepted: the counters are raised to at least
	// Min + 1. Not negative, below MaxFence − RepairHeadroom.
	Min int64
	// AllowMissing repairs when only a quorum of the masters answers. By
	// default every master must answer: one that is down may hold the
	// highest counter.
	AllowMissing bool
	// DryRun reads and reports, and writes nothing.
	DryRun bool
	// Timeout bounds each master's commands; default 2s.
	Timeout time.Duration
	// MaxTTL is the longest TTL a lock may have (the Clients' WithMaxTTL,
	// the daemons' max_ttl); default 24h. A master that lost its data
	// stays out for MaxTTL after the repair: with a majority lost, no
	// quorum of lease horizons bounds the locks it may have held.
	MaxTTL time.Duration

	// trustLaggingCounters takes a master whose counter is below the
	// highest for one that kept its data, as RepairFences once did: for the
	// negative control of the test that shows the rollback it hid.
	trustLaggingCounters bool
}

// MasterRepair is what RepairFences found and did on one master.
type MasterRepair struct {
	Index int
	Addr  string
	// Before is the fencing counter found (0 when the key is missing);
	// After the counter once raised (Before on a dry run or error).
	Before, After int64
	// Marker is the marker value found ("" when missing: the master lost
	// its data, or never served this deployment).
	Marker string
	// Answered: the master answered the read. Err is why it was not read
	// or not repaired; nil on success.
	Answered bool
	Err      error
	// Lost says why RepairFences took the master for one that lost its
	// data, or may have, and so quarantined it (a repair marker with the
	// max TTL stay); "" when it found the master intact.
	Lost string
	// Stay is how long after the repair the master's votes stay out, from
	// the marker written (its <until> − its time): the max TTL stay for a
	// master that lost its data, or longer when an earlier repair's
	// quarantine was later (a repair never shortens one); 0 when intact,
	// on a dry run, or when not repaired.
	Stay time.Duration

	counterMissing   bool          // the fencing counter key is missing
	registeredMaxTTL time.Duration // longest max TTL registered on it
}

// RepairResult reports a RepairFences run.
type RepairResult struct {
	// Highest is the highest counter found; Target what every answering
	// master's counter was raised to (at least): max(Highest+Margin, Min+1).
	Highest, Target int64
	Answered        int // masters that answered the read
	// RegisteredMaxTTL is the longest max TTL a client registered on the
	// masters (maxttl.go). The repaired masters stay out for the longer of
	// it and MaxTTL: a client allowing longer locks than MaxTTL may hold one
	// the repaired masters lost.
	RegisteredMaxTTL time.Duration
	Masters          []MasterRepair
}

// RepairFences is the operator's repair after more than N − quorum masters
// lost their data (`redlockd repair-fences`). Such masters cannot have their
// fencing counters repaired from a quorum (fence.go), so Clients keep them
// out ("repairing") and the deployment refuses locks: failing closed.
// RepairFences reads every master's counter, raises every answering
// master's counter to Target = max(highest + Margin, Min + 1) with a
// max-assign, and writes the marker "repaired <time>" (the master's TIME,
// in ms). A Client whose repair of a master is pending accepts that marker
// when it was written after the master's server started (by the master's
// clock), and the master then counts once its quarantine (max TTL from the
// loss) is over; a Client starting later finds every marker in place and
// keeps such a master out until max TTL after its server started.
//
// A master that lost its data (marker, lease horizon or counter missing)
// or whose counter is below the highest found (it may have rolled back,
// lagging) gets the marker "repaired … operator" with a quarantine of the
// max TTL stay; MasterRepair.Lost says why. The others get one without a
// quarantine, which ends no loss: a Client keeps judging them by what it
// read before.
//
// The guarantee that fences keep increasing is the operator's here: the
// newest fence may have lived only on the masters that lost their data.
// The health loop keeps the others within about one health interval of the
// newest counter, which Margin covers by default; Min, the highest fence the
// protected resource accepted, is the certain bound when it is known.
//
// It needs every master to answer (with AllowMissing, a quorum: fewer could
// all be ones that lost their data) and returns an error wrapping
// ErrQuorumUnavailable otherwise, having written nothing; ErrInvalid for
// bad options or a target above MaxFence − RepairHeadroom. Masters
// that do not answer are left alone: the Clients repair them from a quorum
// when they return. Errors writing one master are reported in its
// MasterRepair and make RepairFences return an error too.
func RepairFences(ctx context.Context, masters []*redis.Options, o RepairOptions) (*RepairResult, error) {
	if len(masters) == 0 {
		return nil, fmt.Errorf("%w: at least one master is required", ErrInvalid)
	}
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	res := &RepairResult{Masters: make([]MasterRepair, len(masters))}
	rdbs := make([]*redis.Client, len(masters))
	for i, mo := range masters {
		rdbs[i] = repairConn(mo, o.Timeout)
		res.Masters[i] = MasterRepair{Index: i, Addr: mo.Addr}
	}
	defer func() {
		for _, r := range rdbs {
			_ = r.Close()
		}
	}()
	readCounters(ctx, rdbs, o, res)
	if err := res.setTarget(o); err != nil || o.DryRun {
		return res, err
	}
	return res, writeRepairs(ctx, rdbs, o, res)
}

// setDefaults checks o and fills in its defaults; ErrInvalid names the
// field that is out of range.
func (o *RepairOptions) setDefaults() error {
	if o.FenceKey == "" {
		o.FenceKey = "redlock:fence"
	}
	if o.MarkerKey == "" {
		o.MarkerKey = "redlock:marker"
	}
	switch {
	case o.Margin < 0 || o.Margin > maxRepairTarget:
		return fmt.Errorf("%w: repair margin must be in [0, %d] (2^53 − 1 − 2^40: a repair leaves 2^40 fences), got %d", ErrInvalid, maxRepairTarget, o.Margin)
	case o.Min < 0 || o.Min >= maxRepairTarget:
		return fmt.Errorf("%w: repair min must be in [0, %d] (2^53 − 2 − 2^40: a repair leaves 2^40 fences), got %d", ErrInvalid, maxRepairTarget-1, o.Min)
	case o.Timeout < 0:
		return fmt.Errorf("%w: repair timeout must be ≥ 0, got %v", ErrInvalid, o.Timeout)
	case o.MaxTTL < 0 || o.MaxTTL > MaxTTLCeiling:
		return fmt.Errorf("%w: repair max TTL must be in [0, %v], got %v", ErrInvalid, MaxTTLCeiling, o.MaxTTL)
	}
	if o.MaxTTL == 0 {
		o.MaxTTL = 24 * time.Hour
	}
	if o.Margin == 0 {
		o.Margin = DefaultRepairMargin
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	return nil
}

// repairConn is a one-connection client to one master that never retries
// and gives up after timeout.
func repairConn(mo *redis.Options, timeout time.Duration) *redis.Client {
	opt := *mo
	opt.MaxRetries = -1
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = timeout, timeout, timeout
	opt.PoolSize = 1
	opt.DisableIdentity = true
	return redis.NewClient(&opt)
}

// readCounters reads every master's fencing counter and marker at once
// into res.Masters, then sums up res.Answered and res.Highest.
func readCounters(ctx context.Context, rdbs []*redis.Client, o RepairOptions, res *RepairResult) {
	var g sync.WaitGroup
	for i, r := range rdbs {
		g.Go(func() {
			mr := &res.Masters[i]
			cctx, cancel := context.WithTimeout(ctx, o.Timeout)
			defer cancel()
			pipe := r.Pipeline()
			fence := pipe.Get(cctx, o.FenceKey)
			marker := pipe.Get(cctx, o.MarkerKey)
			horizon := pipe.Exists(cctx, o.MarkerKey+":horizon")
			registered := pipe.Eval(cctx, maxTTLLua, []string{o.MarkerKey + ":max_ttl"}, 0, maxTTLCeilingMS)
			now := pipe.Time(cctx)
			server := pipe.Info(cctx, "server", "persistence")
			// Not allowed for the ACL user: taken as not durable, as the
			// Clients do (observeConfig).
			conf := pipe.ConfigGet(cctx, "append*")
			_, _ = pipe.Exec(cctx)
			if d, _, err := registryAnswer(registered); err == nil {
				mr.registeredMaxTTL = d
			}
			v, err := fence.Int64()
			if errors.Is(err, redis.Nil) {
				v, err = 0, nil
			}
			if err != nil {
				mr.Err = fmt.Errorf("read fencing counter %q: %w", o.FenceKey, err)
				return
			}
			mr.Marker, err = marker.Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				mr.Err = fmt.Errorf("read marker %q: %w", o.MarkerKey, err)
				return
			}
			mr.Before, mr.After, mr.Answered = v, v, true
			mr.counterMissing = errors.Is(fence.Err(), redis.Nil)
			switch {
			case mr.Marker == "":
				mr.Lost = "marker missing"
			case horizon.Val() == 0:
				mr.Lost = "lease horizon missing"
			case mr.counterMissing:
				mr.Lost = "fencing counter missing"
			default:
				mr.Lost = restartedFromOlderData(mr.Marker, now, server, conf, max(o.MaxTTL, mr.registeredMaxTTL))
			}
		})
	}
	g.Wait()
	for _, mr := range res.Masters {
		if mr.Answered {
			res.Answered++
			res.Highest = max(res.Highest, mr.Before)
			res.RegisteredMaxTTL = max(res.RegisteredMaxTTL, mr.registeredMaxTTL)
		}
	}
	if !o.trustLaggingCounters {
		res.lagging()
	}
}

// restartedFromOlderData applies the Clients' marker rule for a master
// first seen (restoredData) for RepairFences: a master restarted from older
// data (an RDB snapshot) may miss locks, which its counter does not show
// when only an extend was lost, and its repair marker would hide the rule
// from every Client started later, so it is taken for one that lost its
// data. "" when the rule does not apply or a reading is missing; CONFIG GET
// refused (an ACL user) is taken as not durable, as the Clients do.
func restartedFromOlderData(markerValue string, now *redis.TimeCmd, server *redis.StringCmd, conf *redis.MapStringStringCmd, maxTTL time.Duration) string {
	if now.Err() != nil || server.Err() != nil {
		return ""
	}
	_, uptime, _, ok := parseInfoServer(server.Val())
	if !ok {
		return ""
	}
	c, err := conf.Result()
	durable := durableSinceStart(err == nil && c["appendonly"] == "yes" && c["appendfsync"] == "always", parseAOFRewrite(server.Val()))
	why, _ := restoredData(markerValue, now.Val().Add(-uptime), uptime, durable, maxTTL)
	return why
}

// lagging takes every answering master whose fencing counter is below the
// highest found for one that may have rolled back to an older copy of its
// data (DEBUG RELOAD of an old dump, REPLICAOF a server holding one): such
// a master has its marker, lease horizon and counter, and looks intact.
// Raising its counter would hide the rollback from every Client (the
// counter is how a Client sees a rollback that a longer lock's horizon
// hides, countersGrow), and locks it lost may still stand; so it is
// quarantined like a master that lost its data. An intact master's counter
// equals the highest within about one health interval (the daemons copy
// the highest counter to every counting master, spreadFence), so lagging
// is the sign of a rollback, unless locks were granted while RepairFences
// read or the master was out of the daemons' reach meanwhile: it is then
// out for the max TTL stay too, the safe side. Lease horizons are not
// compared: only the masters that voted for a lock raise theirs, so they
// differ between intact masters. A Client that read a higher horizon still
// sees it went down, as the repair marker of an intact master ends no
// loss (adoptRepair) and raises its horizon only to the repair's time.
func (res *RepairResult) lagging() {
	for i := range res.Masters {
		mr := &res.Masters[i]
		if mr.Answered && mr.Lost == "" && mr.Before < res.Highest {
			mr.Lost = fmt.Sprintf("fencing counter %d below the highest found, %d: it may have rolled back to an older copy of its data", mr.Before, res.Highest)
		}
	}
}

// setTarget computes res.Target from what readCounters found, and refuses
// (ErrInvalid) a target beyond MaxFence − RepairHeadroom or (ErrQuorumUnavailable) too few
// answers: fewer than a quorum, or fewer than all without AllowMissing.
func (res *RepairResult) setTarget(o RepairOptions) error {
	n := len(res.Masters)
	quorum := n/2 + 1
	// No overflow: Highest is checked against MaxFence first, and
	// Margin ≤ MaxFence, so the sum stays below 2^54.
	if res.Highest > MaxFence {
		return fmt.Errorf("%w: a fencing counter is %d, above the largest fence %d (the scripts compare counters exactly only up to 2^53); nothing written", ErrInvalid, res.Highest, MaxFence)
	}
	res.Target = max(res.Highest+o.Margin, o.Min+1)
	if res.Target > maxRepairTarget {
		return fmt.Errorf("%w: target %d (highest %d + margin %d, or min %d + 1) is above %d, which leaves 2^40 fences below the largest fence %d; nothing written", ErrInvalid, res.Target, res.Highest, o.Margin, o.Min, maxRepairTarget, MaxFence)
	}
	if res.Answered < quorum {
		return fmt.Errorf("%w: %d of %d masters answered, a repair needs at least %d (the newest counters may be on the silent ones)", ErrQuorumUnavailable, res.Answered, n, quorum)
	}
	if res.Answered < n && !o.AllowMissing {
		return fmt.Errorf("%w: %d of %d masters answered; a master that is down may hold the highest counter: bring it back, or allow missing masters (--allow-missing; and give the floor you know with --min)", ErrQuorumUnavailable, res.Answered, n)
	}
	if o.Min == 0 && !res.anyCounter() {
		// Highest + Margin would start the fences again at Margin: below
		// what a deployment repaired once before has issued (a wipe of
		// every master, repaired from nothing, sent fence 1000018 back to
		// 1000001).
		return fmt.Errorf("%w: no master that answered kept its fencing counter %q, so the newest fence issued is unknown; give --min (RepairOptions.Min): it must be at least the highest fence any protected resource has accepted — read it from the resources, do not guess — because a lower value sends fences backwards, and new locks then get fences the resources have already seen; nothing written", ErrInvalid, o.FenceKey)
	}
	return nil
}

// anyCounter reports whether an answering master holds the fencing counter.
func (res *RepairResult) anyCounter() bool {
	for _, mr := range res.Masters {
		if mr.Answered && !mr.counterMissing {
			return true
		}
	}
	return false
}

// writeRepairs raises every answering master's counter to res.Target and
// writes its repair marker, all at once (repairOne). Its error names the
// masters that failed; each MasterRepair.Err says why.
func writeRepairs(ctx context.Context, rdbs []*redis.Client, o RepairOptions, res *RepairResult) error {
	target := strconv.FormatInt(res.Target, 10)
	var g sync.WaitGroup
	for i, r := range rdbs {
		if !res.Masters[i].Answered {
			continue
		}
		g.Go(func() {
			mr := &res.Masters[i]
			if err := repairOne(ctx, r, o, target, res.RegisteredMaxTTL, mr); err != nil {
				mr.Err = err
			}
		})
	}
	g.Wait()
	var failed []string
	for _, mr := range res.Masters {
		if mr.Answered && mr.Err != nil {
			failed = append(failed, mr.Addr)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("redlock: repair failed on %s", strings.Join(failed, ", "))
	}
	return nil
}

// repairOne raises one master's counter to target and writes the repair
// marker with the master's own time. A server that started less than a
// second ago is waited for: a Client compares the marker's time with the
// start time it derives from INFO's whole-second uptime, which may be up to
// a second late.
func repairOne(ctx context.Context, r *redis.Client, o RepairOptions, target string, registered time.Duration, mr *MasterRepair) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, o.Timeout)
		info, err := r.Info(cctx, "server").Result()
		cancel()
		if err != nil {
			return fmt.Errorf("INFO server: %w", err)
		}
		if _, uptime, _, ok := parseInfoServer(info); ok && uptime >= time.Second {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	cctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	info, err := r.Info(cctx, "server").Result()
	if err != nil {
		return fmt.Errorf("INFO server: %w", err)
	}
	runID, _, _, _ := parseInfoServer(info)
	var hold int64 // a master that kept its data is not quarantined
	if mr.Lost != "" {
		// Read the registry again: after a wipe the clients' probes
		// register anew within a health interval, and the wait above
		// usually gives them that time. The Clients also keep their own
		// bound after an operator's repair (repairEnd); this shortens
		// what a Client that never knew the longer TTL would accept.
		if d, _, err := registryAnswer(maxTTLScript.Eval(cctx, r, []string{o.MarkerKey + ":max_ttl"}, 0, maxTTLCeilingMS)); err == nil {
			registered = max(registered, d)
		}
		hold = max(o.MaxTTL, registered).Milliseconds()
	}
	nonce, err := RandomToken()
	if err != nil {
		return err
	}
	ms := strconv.FormatInt(hold, 10)
	// A master that kept its data lost no lock: nothing to bound; "kept"
	// says so to the idempotency records too (marker).
	by := "kept"
	if mr.Lost != "" {
		by = "operator"
	}
	out, err := repairScript.Run(cctx, r, []string{o.MarkerKey, o.MarkerKey + ":horizon", o.FenceKey}, target, ms, nonce[:16], ms, runID, by).Slice()
	if err != nil || len(out) != 3 {
		return fmt.Errorf("raise fencing counter and write the repair marker: %w", err)
	}
	mr.After, _ = out[1].(int64)
	if v, _ := out[0].(string); v != "" {
		if mk, ok := parseMarker(v); ok && mk.repaired && mk.until.After(mk.at) {
			mr.Stay = mk.until.Sub(mk.at)
		}
	}
	return nil
}
