package redlock

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// A master's clock, in one file: the per-probe guard (clockGuard: a jump
// or a drift between two readings of one master), the reference each vote
// is checked against (clockRef, check 1), and the comparison with the
// other masters (checkClockAgreement, check 2). What they conclude moves
// the master's state through judge (masterstate.go: obsClockFault,
// obsClockChecked, obsClockDisagrees, obsClockAgrees). The bounds they
// use, registered with every master, are in clockbounds.go.

// clockGuard tracks one master's wall clock against ours from TIME samples.
// Redis expires keys by its wall clock, so a master whose clock jumps
// forward drops locks early, and one that runs fast shortens every TTL: both
// break Redlock's drift assumption (Kleppmann, "How to do distributed
// locking", timing assumptions). The guard reports:
//
//   - a forward jump: the offset grew by more than the per-master timeout
//     plus the drift allowance since the previous sample;
//   - drift: over a window of at least minDriftSpan, the offset changed at a
//     rate above the drift factor.
//
// Every offset is uncertain by half the probe's round trip (the master read
// its clock somewhere within it), and both checks discount that
// uncertainty, so a loaded machine whose probes answer slowly is not taken
// for a jumping or drifting clock. Samples whose round trip exceeds the
// per-master timeout are ignored altogether.
type clockGuard struct {
	perMasterTimeout time.Duration

	samples []clockSample // oldest first, at most maxClockSamples
	offset  time.Duration // last accepted offset
	rate    float64       // last computed rate over the window
}

type clockSample struct {
	local  time.Time // our monotonic midpoint of the probe
	offset time.Duration
	// uncertainty is half the probe's round trip: the master read its
	// clock somewhere within it, so offset is known to ± this much.
	uncertainty time.Duration
}

const (
	maxClockSamples = 256              // a memory bound; the window is set by time
	maxDriftWindow  = 10 * time.Second // the rate is judged over about this long
	minDriftSpan    = 3 * time.Second
)

type clockEvent int

const (
	clockOK clockEvent = iota
	clockJumpForward
	clockJumpBackward
	clockDrifting
)

// observe records one TIME sample: sent and received are our clock around
// the TIME call (with monotonic readings), remote the master's answer;
// driftFactor is the one clocks are judged by (Client.detectDrift).
func (g *clockGuard) observe(sent, received, remote time.Time, driftFactor float64) (clockEvent, time.Duration) {
	rtt := received.Sub(sent)
	if rtt > g.perMasterTimeout || rtt < 0 {
		return clockOK, 0
	}
	mid := sent.Add(rtt / 2)
	// Wall-clock difference at the midpoint; Round(0) strips the monotonic
	// reading so that Sub compares wall clocks.
	offset := remote.Sub(mid.Round(0))
	s := clockSample{local: mid, offset: offset, uncertainty: rtt / 2}
	if n := len(g.samples); n > 0 {
		prev := g.samples[n-1]
		elapsed := mid.Sub(prev.local)
		allow := g.perMasterTimeout + time.Duration(float64(elapsed)*driftFactor) + 2*time.Millisecond +
			s.uncertainty + prev.uncertainty
		delta := offset - prev.offset
		if delta > allow || delta < -allow {
			// A jump resets the window: the rate before and after it are
			// separate questions.
			g.samples = append(g.samples[:0], s)
			g.offset, g.rate = offset, 0
			if delta > 0 {
				return clockJumpForward, delta
			}
			return clockJumpBackward, delta
		}
	}
	g.samples = append(g.samples, s)
	// Keep about maxDriftWindow of samples whatever the probe interval (a
	// count-based window of 30 never spanned minDriftSpan at intervals
	// below ~100ms, so drift went unchecked).
	drop := 0
	for len(g.samples)-drop > 2 && mid.Sub(g.samples[drop+1].local) >= maxDriftWindow {
		drop++
	}
	if n := len(g.samples) - drop; n > maxClockSamples {
		drop += n - maxClockSamples
	}
	if drop > 0 {
		g.samples = append(g.samples[:0], g.samples[drop:]...)
	}
	g.offset = offset
	first := g.samples[0]
	span := mid.Sub(first.local)
	if span < minDriftSpan {
		return clockOK, 0
	}
	delta := offset - first.offset
	g.rate = float64(delta) / float64(span)
	// Drifting only if even the most favourable reading of the two
	// samples' uncertainty leaves a rate above the drift factor.
	slack := s.uncertainty + first.uncertainty
	least := max(delta-slack, 0)
	if delta < 0 {
		least = min(delta+slack, 0)
	}
	if r := float64(least) / float64(span); r > driftFactor || r < -driftFactor {
		return clockDrifting, delta
	}
	return clockOK, 0
}

// The clock guard: what a health probe's TIME reading does to a master.

// observeClock feeds one TIME reading into the master's clock estimator
// (sent and received: our clock around the request, remote: its reply) and
// keeps the master out until its lease horizon on a forward jump or a new
// drift.
func (m *master) observeClock(sent, received, remote time.Time) {
	f := m.c.detectDrift()
	m.st.mu.Lock()
	ev, delta := m.st.clock.observe(sent, received, remote, f)
	wasDrifting := m.st.drifting
	switch ev {
	case clockDrifting:
		m.st.drifting = true
	case clockOK:
		if m.st.clock.rate < f/2 && m.st.clock.rate > -f/2 {
			m.st.drifting = false
		}
	}
	m.st.mu.Unlock()
	switch {
	case ev == clockJumpForward:
		// Its keys may have expired early: treat it like a restart
		// without data, minus the fencing repair (the counter is intact).
		m.clockJumped(delta, "a health probe")
	case ev == clockJumpBackward:
		m.c.opts.logger.Warn("master wall clock jumped backward (its locks will last longer)", masterAttr(m), slog.Duration("by", -delta))
	case ev == clockDrifting && !wasDrifting:
		// Keys set while it ran fast may expire early, for up to max TTL.
		m.holdUntilHorizon(fmt.Sprintf("wall clock drifts at rate %.4f, above the drift factor %.4f", m.st.clock.rate, f))
	}
}

// Clock checks on every vote and against the other masters.
//
// Redis expires keys by its wall clock, so a master whose clock jumps
// forward by J drops every key it holds J early. The drift allowance
// (Client.drift) absorbs jumps up to clockAllowance; every larger forward
// jump must be caught before the jumped master's vote counts for a second
// holder. Three checks do that:
//
//  1. Every vote script returns the master's TIME (vote_prelude.lua). The
//     vote counts only if the master's offset from our clock has not moved
//     forward since the reference (what the readings so far, a probe's or
//     an earlier vote's, say together: narrowed) by
//     more than the two readings' uncertainty (half of each round trip: the
//     master read its clock somewhere within it) plus drift_factor × the
//     time between them. Otherwise the vote is discarded and the master
//     quarantined (checkVoteClock). A jump is thus caught in the same round
//     trip as the first vote after it, not at the next probe.
//  2. Every probe round compares each master's offset with the other
//     masters' (checkClockAgreement). A master whose clock differs from a
//     quorum of the others, or from a strict majority of the readings, does
//     not vote (a first vote, or one without a recent reference, is judged
//     against the others' references: agreesWithOthers), whether
//     or not this Client saw the jump happen (it may have jumped while no
//     daemon watched, or before this daemon started); once it agrees again
//     it stays out until its lease horizon has passed.
//  3. The drift-rate guard (clock.go) catches a clock that runs fast.
//
// The blind spot: a forward jump smaller than the uncertainty of check 1 is
// not seen. A vote counts only when its reading and the reference are
// uncertain by at most maxUncertainty together (the per-master timeout, at
// most 100ms; at the default 50ms timeout every vote in time qualifies),
// and the readings are at most maxRefAge apart, which adds drift_factor ×
// maxRefAge. clockAllowance is that sum plus the TIME resolution, and
// Client.drift subtracts it from every validity: 71ms at the defaults.
// Check 2 judges only readings uncertain by at most an eighth of
// maxUncertainty and tolerates a quarter of it, so a jump it misses (from
// one side of the tolerance to the other) is at most maxUncertainty too.
// Every bound here is the strictest any client of the masters registered,
// and the allowance the loosest (clockbounds.go).

// clockRef is one reading of a master's clock against ours.
type clockRef struct {
	at     int64 // when, in monotonic ns since the Client's epoch (the round trip's midpoint)
	offset int64 // master's wall clock − ours, ns; ours derived from the monotonic clock
	uncert int64 // ± ns: half the round trip
}

// clockResolution covers rounding of the masters' TIME and our clock.
const clockResolution = time.Millisecond

// maxRefAge is how old a reading may be to check a vote against: older
// ones leave too much room (drift_factor × age) for an unseen jump. It is
// 2 health intervals within [1s, 2s], or less when another client of the
// masters registered less (clockbounds.go).
func (c *Client) maxRefAge() time.Duration { return c.bounds.Load().refAge }

// maxUncertainty is the most two readings compared by check 1 may be
// uncertain by together: the per-master timeout (which bounds them anyway
// at its default of 50ms), at most 100ms, or less when another client of
// the masters registered less (clockbounds.go). A vote whose readings are
// less precise is not counted (ErrMasterClockUnknown).
func (c *Client) maxUncertainty() time.Duration { return c.bounds.Load().uncert }

// clockAllowance is the largest forward jump of a master's clock that the
// checks above may miss, for this Client or any other client of the
// masters whose registration it has read (clockbounds.go); Client.drift
// subtracts it from every validity.
func (c *Client) clockAllowance() time.Duration {
	if !c.opts.clockAllowance {
		return 0
	}
	return c.bounds.Load().blind
}

// reading returns the clock reading for a master TIME of remote obtained in
// a round trip from sent to received (both with monotonic readings).
func (c *Client) reading(remote, sent, received time.Time) clockRef {
	rtt := received.Sub(sent)
	mid := sent.Add(rtt / 2)
	return clockRef{
		at:     int64(mid.Sub(c.epoch)),
		offset: remote.UnixNano() - (c.epochWall + int64(mid.Sub(c.epoch))),
		uncert: int64(rtt / 2),
	}
}

// jumpSince returns how far the master's clock moved forward from ref to
// s beyond what the readings' uncertainty and drift_factor allow (> 0: a
// certain forward jump), and whether it certainly moved backward.
func (c *Client) jumpSince(ref *clockRef, s clockRef) (forward time.Duration, backward bool) {
	elapsed := s.at - ref.at
	if elapsed < 0 {
		elapsed = -elapsed
	}
	allow := ref.uncert + s.uncert + int64(float64(elapsed)*c.detectDrift()) + int64(clockResolution)
	d := s.offset - ref.offset
	return time.Duration(d - allow), d < -allow
}

// checkVoteClock is check 1 for a vote whose script read the master's
// clock as remote, in a fan-out sent at sent and answered at received.
func (m *master) checkVoteClock(remote, sent, received time.Time) error {
	c := m.c
	ref := m.st.ref.Load()
	s := c.reading(remote, sent, received)
	if !m.st.conds.has(condClockJudged) {
		if agrees, _ := c.agreesWithOthers(m, s); agrees {
			m.judge(observation{kind: obsClockChecked})
		}
	}
	if ref == nil || time.Duration(s.at-ref.at) > c.maxRefAge() {
		// No reading yet, or none recent (the master was paused, its probes
		// too slow): this vote becomes the reference if its clock agrees
		// with the other masters' recent readings (check 2, done here), or,
		// when there are none yet, if it is the very first reading.
		c.kickHealth()
		switch agrees, known := c.agreesWithOthers(m, s); {
		case agrees, !known && ref == nil && time.Duration(2*s.uncert) <= c.maxUncertainty():
			m.st.ref.CompareAndSwap(ref, heapRef(s))
			return nil
		}
		return ErrMasterClockUnknown
	}
	if time.Duration(s.uncert+ref.uncert) > c.maxUncertainty() {
		c.kickHealth()
		return ErrMasterClockUnknown
	}
	fwd, back := c.jumpSince(ref, s)
	if fwd > 0 {
		m.clockJumped(time.Duration(s.offset-ref.offset), "a vote")
		return ErrMasterClockJump
	}
	// A vote is a reading too: it keeps the reference fresh under load,
	// when probes may be too slow to serve as one; and one that shows the
	// clock went back must become the reference at once, or a later step
	// forward to where it was would look like no move at all (while the
	// keys set in between expire early).
	switch {
	case back:
		m.st.ref.CompareAndSwap(ref, heapRef(s))
	case s.uncert <= int64(c.maxUncertainty()/2) && time.Duration(s.at-ref.at) > c.maxRefAge()/4:
		n := c.narrowed(ref, s)
		m.st.ref.CompareAndSwap(ref, &n)
	}
	return nil
}

// heapRef is a copy of s to store as a reference: s itself stays on the
// stack of a vote that stores nothing (most of them), one allocation less
// per vote (taking &s anywhere moved every reading to the heap).
func heapRef(s clockRef) *clockRef { return &s }

// narrowed is the reference that ref and a later reading s, which showed
// no jump either way, give together: the offsets s allows (offset ±
// uncert) that ref allows too, once widened by drift_factor × the time
// between them. Replacing the reference by each new reading instead lets
// a clock creep forward by up to the readings' uncertainty at every step,
// each step unseen: a master behind a slow link (readings too imprecise
// for check 2) whose clock ran 25% fast went unseen for seconds, and its
// keys expired while their holders were still told they were valid
// (TestFastClockOverASlowLink). The intersection moves no faster than a
// sane clock, so the forward jumps that check 1 misses add up to no more
// than one: the bound in clockAllowance.
func (c *Client) narrowed(ref *clockRef, s clockRef) clockRef {
	elapsed := s.at - ref.at
	if elapsed < 0 {
		elapsed = -elapsed
	}
	grow := int64(float64(elapsed) * c.detectDrift())
	lo := max(ref.offset-ref.uncert-grow, s.offset-s.uncert)
	hi := min(ref.offset+ref.uncert+grow, s.offset+s.uncert)
	if lo > hi {
		// Apart by less than clockResolution (or a step back too small
		// to be certain): the edge of ref's reach nearest to s.
		if s.offset > ref.offset {
			lo = hi
		} else {
			hi = lo
		}
	}
	return clockRef{at: s.at, offset: lo + (hi-lo)/2, uncert: (hi - lo + 1) / 2}
}

// observeReading is check 1 for a probe's TIME reading; a usable reading
// (round trip within the per-master timeout) becomes the new reference.
func (m *master) observeReading(s clockRef) {
	c := m.c
	if time.Duration(2*s.uncert) > c.maxUncertainty() {
		return
	}
	next := &s
	if ref := m.st.ref.Load(); ref != nil && c.opts.voteClockGuard {
		switch fwd, back := c.jumpSince(ref, s); {
		case fwd > 0:
			m.clockJumped(time.Duration(s.offset-ref.offset), "a health probe")
		case !back:
			n := c.narrowed(ref, s)
			next = &n
		}
	}
	m.st.ref.Store(next)
}

// clockJumped quarantines a master whose clock jumped forward by delta:
// its keys may have expired early, so its votes stay out until every lock
// it may have held has ended (its lease horizon, set by the next health
// round; max TTL until then).
func (m *master) clockJumped(delta time.Duration, via string) {
	m.holdUntilHorizon(fmt.Sprintf("wall clock jumped forward by %v (seen by %s)", delta.Round(time.Millisecond), via))
}

// holdUntilHorizon quarantines a master that kept its data but whose keys
// may have expired early (judge, obsClockFault).
func (m *master) holdUntilHorizon(reason string) {
	m.judge(observation{kind: obsClockFault, reason: reason})
}

// checkClockAgreement is check 2, run after every probe round over the
// precise readings there are (at least a quorum of them): a master whose
// offset differs (beyond both readings' uncertainty and the tolerance)
// from a quorum of the other masters', or from a strict majority of the
// readings (its own counted as agreeing), is held out until it agrees
// again, and then until its lease horizon has passed; a master that agrees
// with at least quorum − 1 others (it and they make a quorum) is judged to
// agree. A round that shows neither judges nothing.
//
// Why counts and not a median: with N − quorum masters' clocks off (the
// faults the deployment is built to survive) and one sane master's
// reading missing or imprecise, the readings are two sane and two faulty
// and their median (the upper middle) a faulty clock, which held the sane
// masters out — all of them, then each until its horizon. With counts a
// tie holds nobody. A faulty master in a strict minority of the readings
// is held, as by the median (a faulty master next to two sane readings
// only, say); so is a sane one when the readings are two faulty clocks
// that agree and itself — the one case counts cannot tell from the
// other, decided for safety. A faulty master is judged to agree only
// within the tolerance of a sane one (it agrees with at most N − quorum − 1
// other faulty ones, fewer than quorum − 1), so its error is within
// clockAllowance, as before.
func (c *Client) checkClockAgreement() {
	if !c.opts.clockGuard || !c.opts.clockReference {
		return
	}
	tight := int64(c.maxUncertainty() / 8)
	type sample struct {
		m *master
		s clockRef
	}
	var fresh []sample
	for _, m := range c.masters {
		s, ok := m.st.lastReading.Load(), m.answeredProbe()
		if ok && s != nil && s.uncert <= tight && time.Duration(c.sinceEpoch()-s.at) < c.opts.healthInterval+c.opts.healthTimeout {
			fresh = append(fresh, sample{m, *s})
		}
	}
	if len(fresh) < c.quorum {
		return // too few precise readings to judge by
	}
	offs := make([]int64, len(fresh))
	for i, f := range fresh {
		offs[i] = f.s.offset
	}
	slices.Sort(offs)
	median := offs[len(offs)/2] // for the log: the judgement counts pairs
	tolerance := int64(c.maxUncertainty() / 4)
	for _, f := range fresh {
		agree, differ := 0, 0
		for _, o := range fresh {
			switch {
			case o.m == f.m:
			case offsetsDiffer(f.s, o.s, tolerance):
				differ++
			default:
				agree++
			}
		}
		m := f.m
		switch {
		case differ >= c.quorum || differ > agree+1:
			by := time.Duration(f.s.offset - median)
			why := fmt.Sprintf("wall clock differs from the median of the masters by %v, and from %d of the other %d masters' precise clock readings (tolerance %v): votes stop until it agrees, then until its lease horizon; fix its clock (NTP)", by.Round(time.Millisecond), differ, len(fresh)-1, time.Duration(tolerance))
			if m.judge(observation{kind: obsClockDisagrees, reason: why}) {
				c.opts.logger.Warn("master clock disagrees with the other masters: held out", masterAttr(m), slog.Duration("by", by))
			}
		case agree >= c.quorum-1:
			m.judge(observation{kind: obsClockAgrees})
		}
	}
}

// offsetsDiffer reports whether readings a and b of two masters' offsets
// differ by more than tolerance beyond both readings' uncertainty.
func offsetsDiffer(a, b clockRef, tolerance int64) bool {
	d := a.offset - b.offset
	if d < 0 {
		d = -d
	}
	return d-a.uncert-b.uncert > tolerance
}

// agreesWithOthers is check 2 for one reading s of m against the other
// masters' recent references: known is false when fewer than quorum − 1
// of them have one. With at least a quorum of them, s must agree with
// their median (a minority of faulty clocks among them cannot move it).
// With exactly quorum − 1 (e.g. N − quorum masters down, the failures the
// deployment is built to survive), s must agree with every one of them:
// m and they make a quorum, and a master whose clock jumped disagrees with
// every sane one, so it passes only if all quorum − 1 others jumped alike
// — a quorum of faulty masters, beyond what any check can cover. A sane m
// next to a faulty other fails closed (its vote waits for the next probe's
// reading), which costs availability only beyond N − quorum faults. Only
// precise readings are judged (s and every reference used within an
// eighth of maxUncertainty), with the same tolerance as check 2,
// so a jump it lets through is within clockAllowance.
func (c *Client) agreesWithOthers(m *master, s clockRef) (agrees, known bool) {
	if !c.opts.clockReference {
		return false, false
	}
	now := c.sinceEpoch()
	offs := make([]clockRef, 0, len(c.masters))
	for _, o := range c.masters {
		if o == m {
			continue
		}
		if r := o.st.ref.Load(); r != nil && time.Duration(now-r.at) <= c.maxRefAge() {
			offs = append(offs, *r)
		}
	}
	if len(offs) < c.quorum-1 {
		return false, false
	}
	judge := offs // every one of quorum − 1
	if len(offs) >= c.quorum {
		slices.SortFunc(offs, func(a, b clockRef) int { return cmp.Compare(a.offset, b.offset) })
		judge = offs[len(offs)/2 : len(offs)/2+1] // their median
	}
	tight := int64(c.maxUncertainty() / 8)
	if s.uncert > tight {
		return false, true
	}
	tolerance := int64(c.maxUncertainty() / 4)
	for _, r := range judge {
		if r.uncert > tight || offsetsDiffer(s, r, tolerance) {
			return false, true
		}
	}
	return true, true
}
