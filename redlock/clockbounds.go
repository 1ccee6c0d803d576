package redlock

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
)

// Clients that share masters must not loosen each other's clock bounds.
//
// A holder A budgets, in every validity, for the clock movement of a
// master that no check of any contender B sees: drift(ttl) = f·ttl + 2ms +
// allowance. B's checks miss a steady rate up to the drift factor they
// judge by, f_B, and, once, a forward jump up to their blind spot
// blind_B = u_B + f_B·r_B + 1ms (clock.go: u the uncertainty bound of
// two readings, r the oldest reference). Over A's lock of ttl t, the
// master's clock may thus run ahead of real time, unseen by B, by at most
// f_B·t + blind_B. A's key on that master outlives A's validity, so B's
// vote from it cannot count for a second holder, if
//
//	f_B·t + blind_B ≤ f_A·t + allowance_A    for every pair A, B.      (*)
//
// With one drift_factor per daemon that fails: A at 0.01 budgets 83ms for
// a 1s lock, while B at 0.4 accepts a 280ms jump unseen.
//
// So every Client registers its own bounds (f, u, r) on every master at
// every health probe, in the probe's pipeline (scripts/clock_bounds.lua),
// kept for its max TTL plus two probe rounds after each registration: at
// least as long as any lock it granted since its last registration. From
// every answer it keeps, for the rest of its life (an entry that expired
// on one master may be live on another; the bounds only tighten):
//
//   - for its checks: the smallest f, u and r registered and its own
//     (detectDrift, maxUncertainty, maxRefAge), so blind_B ≤ blind_X and
//     f_B ≤ f_X for every client X whose entry B has read;
//   - for its validities: the largest f and the largest blind spot
//     registered and its own (budgetDrift, clockAllowance), so
//     f_A ≥ f_X and allowance_A ≥ blind_X for every X whose entry A has
//     read (X's blind spot at X's own f, which its checks never exceed).
//
// (*) then holds for A and B whatever their configs, because on the master
// M that voted for both, one of them registered (and read) before the
// other: both scripts run atomically on M, and a Client's first probe of M,
// which registers, comes before M's first vote for it counts (New probes
// every master before it returns). If B registered first, A read B's entry
// before its vote from M counted, so f_A ≥ f_B and allowance_A ≥ blind_B
// from A's first lock on. Otherwise B read A's entry before its first vote
// from M, and judges M by f ≤ f_A and blind spot ≤ blind_A ≤ allowance_A.
// Neither case needs the other client's next probe, so no window opens
// while a registration travels. A's entry expires at the earliest
// its max TTL after its last probe by M's clock; a newcomer reads every
// master before it votes, and a quorum of A's masters (those that voted)
// keep A's entry unless a quorum of clocks jumped, which no check covers.

// MaxDriftFactor is the largest drift factor New accepts (WithDriftFactor):
// at 0.1 a 1s lock loses 100ms to drift and up to 301ms to the clock
// allowance. The Redis Redlock page uses 0.01.
const MaxDriftFactor = 0.1

// driftPPM is the registry's unit of a drift factor: parts per million.
const driftPPM = 1_000_000

// clockBounds are the clock bounds this Client knows of on its masters:
// its own, tightened by what other clients registered.
type clockBounds struct {
	detectDrift float64       // smallest drift factor: judges clocks
	budgetDrift float64       // largest drift factor: drift(ttl)
	uncert      time.Duration // smallest maxUncertainty
	refAge      time.Duration // smallest maxRefAge
	blind       time.Duration // largest blind spot, at each client's own factor
}

// ClockBounds is what a Client uses to judge its masters' clocks and to
// budget its validities, once other clients of the masters are counted in.
type ClockBounds struct {
	// DriftFactor is the smallest drift factor registered on the masters
	// (this Client's own or lower): the drift rate and jumps its clock
	// checks tolerate.
	DriftFactor float64
	// ValidityDriftFactor is the largest registered (this Client's own or
	// higher): drift(ttl) subtracts ttl × it from every validity.
	ValidityDriftFactor float64
	// ClockAllowance is the largest forward jump any registered client's
	// clock checks may miss, which every validity also loses.
	ClockAllowance time.Duration
}

// ClockBounds returns the clock bounds the Client uses now.
func (c *Client) ClockBounds() ClockBounds {
	b := c.bounds.Load()
	return ClockBounds{DriftFactor: b.detectDrift, ValidityDriftFactor: b.budgetDrift, ClockAllowance: c.clockAllowance()}
}

// ownBounds are the Client's bounds from its own options alone.
func (o *options) ownBounds() clockBounds {
	uncert := min(o.perMasterTimeout, 100*time.Millisecond)
	refAge := min(max(2*o.healthInterval, time.Second), 2*time.Second)
	return clockBounds{
		detectDrift: o.driftFactor,
		budgetDrift: o.driftFactor,
		uncert:      uncert,
		refAge:      refAge,
		blind:       uncert + time.Duration(float64(refAge)*o.driftFactor) + clockResolution,
	}
}

// member is the Client's registry entry, "f:u:r" (ppm, µs, µs).
func (b clockBounds) member() string {
	return fmt.Sprintf("%d:%d:%d", int64(math.Round(b.detectDrift*driftPPM)), b.uncert.Microseconds(), b.refAge.Microseconds())
}

// clockBoundsArgs are clock_bounds.lua's ARGV for this Client's probe.
func (c *Client) clockBoundsArgs() []any {
	o := &c.opts
	keep := min(o.maxTTL+2*(o.healthInterval+o.healthTimeout), MaxTTLCeiling)
	return []any{c.own.member(), keep.Milliseconds(), maxTTLCeilingMS,
		int64(MaxDriftFactor * driftPPM), (100 * time.Millisecond).Microseconds(),
		time.Second.Microseconds(), (2 * time.Second).Microseconds()}
}

// parseClockBounds reads a clock_bounds.lua answer: ok is false when no
// entry was live. The script already skips what New would refuse; the
// ranges are enforced again here so that no answer can loosen a check
// beyond New's limits.
func parseClockBounds(cmd *redis.Cmd) (b clockBounds, ok bool, odd int64, err error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		return b, false, 0, err
	}
	if len(v) != 7 {
		return b, false, 0, errBadReply
	}
	clamp := func(x, lo, hi int64) int64 { return min(max(x, lo), hi) }
	us := func(x, lo, hi int64) time.Duration { return time.Duration(clamp(x, lo, hi)) * time.Microsecond }
	b = clockBounds{
		detectDrift: float64(clamp(v[1], 0, MaxDriftFactor*driftPPM)) / driftPPM,
		budgetDrift: float64(clamp(v[2], 0, MaxDriftFactor*driftPPM)) / driftPPM,
		uncert:      us(v[3], 1, 100_000),
		refAge:      us(v[4], 1_000_000, 2_000_000),
		blind:       us(v[5], 0, 100_000+MaxDriftFactor*2_000_000) + clockResolution,
	}
	return b, v[0] > 0, v[6], nil
}

// registeredClockBounds takes the answer of a probe's registration. A
// master that refuses it (an ACL without ZADD) is logged once: a client
// with looser bounds may then share the masters unseen.
func (m *master) registeredClockBounds(cmd *redis.Cmd) {
	b, ok, odd, err := parseClockBounds(cmd)
	if err != nil {
		if !m.clockBoundsRefused.Swap(true) {
			m.c.opts.logger.Warn("master refused this client's clock bounds registration; clients with other drift factors or timeouts may loosen each other's clock checks", masterAttr(m), slog.Any("error", err))
		}
		return
	}
	m.clockBoundsRefused.Store(false)
	if odd > 0 && !m.clockBoundsOdd.Swap(true) {
		m.c.opts.logger.Warn("the clock bounds registry on this master holds entries no client writes: skipped",
			masterAttr(m), slog.String("key", m.c.opts.clockBoundsKey), slog.Int64("entries", odd))
	}
	if ok {
		m.c.noteClockBounds(b)
	}
}

// noteClockBounds merges bounds another client registered: checks only
// get stricter, budgets only larger.
func (c *Client) noteClockBounds(r clockBounds) {
	for {
		cur := c.bounds.Load()
		next := clockBounds{
			detectDrift: min(cur.detectDrift, r.detectDrift),
			budgetDrift: max(cur.budgetDrift, r.budgetDrift),
			uncert:      min(cur.uncert, r.uncert),
			refAge:      min(cur.refAge, r.refAge),
			blind:       max(cur.blind, r.blind),
		}
		if next == *cur {
			return
		}
		if c.bounds.CompareAndSwap(cur, &next) {
			if !c.boundsWarned.Swap(true) {
				c.opts.logger.Warn("another client of these masters has other clock bounds: this client judges clocks by the strictest and budgets validities for the loosest",
					slog.Float64("drift_factor", c.opts.driftFactor), slog.Float64("strictest_drift_factor", next.detectDrift),
					slog.Float64("validity_drift_factor", next.budgetDrift), slog.Duration("clock_allowance", c.clockAllowance()))
			}
			return
		}
	}
}

// detectDrift is the drift factor clocks are judged by.
func (c *Client) detectDrift() float64 { return c.bounds.Load().detectDrift }

// stricterBoundsNote says, for a master's reason, that the clock bounds
// this Client judges by are stricter than its own because of another
// entry in the masters' registry — the cause, when readings do not count,
// is then that entry, not this Client's settings. "" when they are its own.
func (c *Client) stricterBoundsNote() string {
	b, own := c.bounds.Load(), c.own
	if b.uncert >= own.uncert && b.refAge >= own.refAge && b.detectDrift >= own.detectDrift {
		return ""
	}
	return fmt.Sprintf("; clocks are judged by the strictest bounds another client registered in %q (a reading uncertain by at most %v, a reference at most %v old, drift factor %g; this client's own: %v, %v, %g): a registered entry that is too strict holds every master back until it expires or is removed",
		c.opts.clockBoundsKey, b.uncert, b.refAge, b.detectDrift, own.uncert, own.refAge, own.detectDrift)
}

// budgetDrift is the drift factor validities are budgeted for.
func (c *Client) budgetDrift() float64 { return c.bounds.Load().budgetDrift }
