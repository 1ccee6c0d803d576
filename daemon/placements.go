package daemon

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// The placement registry: which layouts of master groups daemons lock on,
// and until when.
//
// Step 2 of a change of master groups (docs/operations.md, redlock/moving.go)
// must last max TTL after the last daemon on the old groups stopped: until
// then a lock it took on a moved key may stand in the key's old group
// only, which a daemon on the new groups does not ask. `redlockd
// groups-change` used to count from the last moving daemon's start, which
// is that moment only when every old daemon was gone by then; in a rolling
// update the new daemons start first and the old ones serve on through
// their drain. A black-box pass took a moved key through an old daemon
// after the moving one started, stopped the old one, and groups-change
// said "step 2 done" a second later: a daemon on the new groups then
// granted the key again, the first lock still valid.
//
// So every daemon registers its layout on the first group's masters (the
// first group is first in both lists of a change, so old and moving daemons
// share it) every health interval: a sorted set, member "<phase> <group
// names>", score the master's time (unix ms) until which the daemon may
// still be locking on that layout — now + placementAlive, well past its
// next registration. A moving daemon reads the score of "stable <its
// previous groups>" with its own registration, from a quorum of masters
// that kept their data since it started (a master that lost it may have
// lost a registration), and reports it in /readyz (placement
// old_until_ms); groups-change ends step 2 no sooner than that time plus
// the max TTL. The script runs after the vote prelude (QuorumScript), so a
// master that lost its data answers so and is not counted.
//
// What it does not see: an old daemon of an earlier version (it does not
// register; the moving daemons' start then bounds step 2, as before), and
// one that could not reach a quorum of the first group while it granted
// moved keys in another group.
//
//go:embed scripts/placements.lua
var placementRegistryScript string

var placementScript = redlock.NewQuorumScript(placementRegistryScript)

//go:embed scripts/placements_admit.lua
var placementAdmitLua string

var placementAdmitScript = redlock.NewQuorumScript(placementAdmitLua)

// registryExtra is what a master's answer to placements.lua says after its
// code and value: the watched layout's score (0: none) and this daemon's
// layout's admissions there (admit).
type registryExtra struct {
	watched int64
	// free: until when a lock granted by a layout that may not lock
	// beside this daemon's may stand (unix ms by the master's clock; 0
	// none): each such registration's end + the max TTL its daemons
	// recorded with it (the longest registered for a daemon that recorded
	// none).
	free       int64
	admissions []registryAdmission
}

// registryAdmission is one admission of a repaired master: repaired is
// the repair's time (MasterAnswer.KeptSince, unix ms), block the max TTL
// the admitting daemon's round used (ms).
type registryAdmission struct{ repaired, block int64 }

// admittedFor reports whether x's master was admitted for its repair at
// repaired (MasterAnswer.KeptSince) by a daemon on this daemon's layout
// whose max TTL was at least block (this daemon before a restart, admit):
// the admission's claim then holds for this daemon too.
func (x registryExtra) admittedFor(repaired time.Time, block time.Duration) bool {
	for _, ad := range x.admissions {
		if ad.repaired == repaired.UnixMilli() && ad.block >= block.Milliseconds() {
			return true
		}
	}
	return false
}

// parseRegistryExtra parses "<watched> <free> [<repaired>:<block> ...]".
func parseRegistryExtra(s string) (registryExtra, bool) {
	f := strings.Fields(s)
	if len(f) < 2 {
		return registryExtra{}, false
	}
	w, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return registryExtra{}, false
	}
	free, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return registryExtra{}, false
	}
	x := registryExtra{watched: int64(w), free: free}
	for _, a := range f[2:] {
		k, b, ok := strings.Cut(a, ":")
		rk, err1 := strconv.ParseInt(k, 10, 64)
		rb, err2 := strconv.ParseInt(b, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return registryExtra{}, false
		}
		x.admissions = append(x.admissions, registryAdmission{rk, rb})
	}
	return x, true
}

//go:embed scripts/fence_jump.lua
var fenceJumpLua string

var fenceJumpScript = redlock.NewQuorumScript(fenceJumpLua)

// FenceJump is how far a daemon raises its groups' fencing counters above
// the highest they hold when its layout gate first grants after another
// layout it may not lock beside locked (JumpFences): redlock.DefaultRepairMargin, the
// margin a repair uses for the same reason.
const FenceJump = redlock.DefaultRepairMargin

// JumpFences raises the fencing counters of every group's masters to
// margin above the highest a quorum of each holds now, and returns nil once
// a quorum of each took it; key routes the calls (any key). The layout
// gate runs it before the first grant after a layout it may not lock beside
// registered (SetFenceJump): that layout's daemons gave moved keys fences
// from groups this daemon may not have (a new group), synced to its groups
// only every health interval (redlock.Groups.SyncFences). A black-box pass
// paused a daemon on the old groups through a change, let the new daemons
// grant moved keys and stop, and resumed it: once its gate opened it gave
// those keys fences already issued (1410, 1411) or lower (1412 then 1410),
// from the old groups' counters, 3 runs of 3. The counters of this
// daemon's groups were synced by the other layout's daemons up to their
// last health round, so the fences they issued after it are at most the
// grants of one health interval above them: margin must exceed that, as
// for repair-fences (redlock.DefaultRepairMargin). Errors: one matching
// redlock.ErrQuorumUnavailable when a quorum of some group's masters did
// not answer, naming that group ("master group g2: …"; a black-box pass
// read a message that named only the first group, whose quorum was there).
func JumpFences(ctx context.Context, groups []redlock.Group, key string, margin int64) error {
	var highest int64
	round := func(c *redlock.Client, target string) error {
		n := 0
		var failures []error
		err := c.RunQuorumScript(ctx, fenceJumpScript, key, []any{target}, func(a redlock.MasterAnswer) bool {
			if a.Err != nil || a.Code != 1 {
				if a.Err != nil {
					failures = append(failures, a.Err)
				}
				return false
			}
			n++
			highest = max(highest, a.Value)
			return false // every master: the highest counter, or the write everywhere
		})
		if err != nil {
			return err
		}
		if n < c.Quorum() {
			return &redlock.OutcomeError{Op: "fence jump", Kind: redlock.ErrQuorumUnavailable, Quorum: c.Quorum(), Masters: c.MasterCount(), Votes: n, Failures: failures}
		}
		return nil
	}
	for _, g := range groups {
		if err := round(g.Client, ""); err != nil {
			return fmt.Errorf("master group %s: %w", g.Name, err)
		}
	}
	target := strconv.FormatInt(highest+margin, 10)
	for _, g := range groups {
		if err := round(g.Client, target); err != nil {
			return fmt.Errorf("master group %s: %w", g.Name, err)
		}
	}
	return nil
}

// PlacementKey is the placement registry's Redis key under prefix (not
// under "lock:", which lock listings scan).
func PlacementKey(prefix string) string { return prefix + "placements" }

// placementAlive is how long after a registration its daemon may still be
// locking on its layout: ten health intervals, at least 2 s, so that a
// registration that comes late on a loaded machine is still ahead of the
// daemon's last grant.
func placementAlive(interval time.Duration) time.Duration {
	return max(10*interval, 2*time.Second)
}

// PlacementLayout is the registry's member for a daemon on groups (their
// names, in order), moving from the groups from when from is not nil.
func PlacementLayout(from, groups []string) string {
	if from == nil {
		return "stable " + strings.Join(groups, ",")
	}
	return "moving " + strings.Join(from, ",") + ">" + strings.Join(groups, ",")
}

// PlacementReading is one round of RunPlacementRegistry.
type PlacementReading struct {
	// UntilMS is the latest end of the registrations of the layouts that
	// may not lock beside this daemon's (unix ms by the masters' clocks, 0
	// when none), WatchUntilMS that of the watched layout's; OK is false
	// when fewer than a quorum of trusted masters answered (kept their
	// data since a repair at least a registration's life + the max TTL
	// ago, or admitted since their repair: admit), and both then say
	// nothing.
	UntilMS, WatchUntilMS int64
	// FreeMS is until when a lock granted by those layouts may stand:
	// each registration's end + the max TTL its daemons recorded with it
	// (placements.lua), read as UntilMS is.
	FreeMS int64
	OK     bool
	// Registered: this daemon's layout was registered on such a quorum in
	// this round, no layout it may not lock beside seen that may still hold
	// a lock there (PlacementGate).
	Registered bool
	// Sent is when the round was sent (with the monotonic clock reading).
	Sent time.Time
	// Err says, when OK is false, which masters did not count: a
	// *redlock.OutcomeError (Op "placement") matching
	// redlock.ErrQuorumUnavailable.
	Err error
	// Back, when OK is false and it is known, is how long after Sent a
	// quorum counts for the registry again: the masters that count now
	// and the repaired ones, each once a registration it may have lost
	// and the max TTL after it have run out (by its own clock); 0: not
	// known (too few of them answered).
	Back time.Duration
}

// RunPlacementRegistry registers layout on c's masters every interval
// until ctx ends (see the registry above), under gate (the layout gate,
// PlacementGate): a master registers layout only while no layout that may
// not lock beside it has a registration + gate's block ahead of its clock,
// each round goes to gate and then to seen (nil: none), and a check of
// gate can ask for the next round at once. With watch (another layout's
// member; "" none) each round also reads watch's score: a moving daemon
// reads its previous groups' (step 2's end, PlacementReading.WatchUntilMS).
func RunPlacementRegistry(ctx context.Context, c *redlock.Client, key, layout, watch string, interval time.Duration, gate *PlacementGate, seen func(PlacementReading)) {
	alive := placementAlive(interval).Milliseconds()
	t := time.NewTicker(max(interval, 10*time.Millisecond))
	defer t.Stop()
	kick := gate.kick
	// admitted: each repaired master this daemon admitted,
	// by the repair time it was admitted for (admit).
	admitted := map[int]time.Time{}
	extras := map[int]registryExtra{}
	// jumpedFor: the latest registration (unix ms) of the layouts that may
	// not lock beside this one that the last fence jump was made for
	// (SetFenceJump).
	var jumpedFor int64
	for {
		r := PlacementReading{Sent: time.Now()}
		trusted, registered := 0, 0
		block := gate.block()
		args := []any{layout, alive, block.Milliseconds(), watch, gate.maxTTL.Milliseconds()}
		forgotten := time.Duration(alive)*time.Millisecond + block
		var failures []error
		// A repaired master may have lost a registration. It counts once
		// a registration it may have lost has ended and the max TTL passed
		// since, whenever the daemon started: by then every daemon still
		// locking has registered there again (a rule by the daemon's start,
		// repaired before it, would shut a daemon until it restarts when a
		// master is repaired while it runs, and count one repaired just
		// before its start that lost a registration still in force) — or
		// sooner, once admitted (below).
		fresh := func(a redlock.MasterAnswer) bool {
			if a.KeptSince.IsZero() || !a.MasterTime.Before(a.KeptSince.Add(forgotten)) || admitted[a.Index].Equal(a.KeptSince) {
				return false
			}
			return !extras[a.Index].admittedFor(a.KeptSince, block)
		}
		// back: when each answering master counts for the registry, from
		// now (0: counts now), for PlacementReading.Back.
		var back []time.Duration
		var answers []redlock.MasterAnswer
		rctx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
		_ = c.RunQuorumScript(rctx, placementScript, key, args, func(a redlock.MasterAnswer) bool {
			answers = append(answers, a)
			return false // every master is heard: the latest registration wins
		})
		cancel()
		// extras: each answer's extra, parsed once, for the answers that
		// count as the registry's (valid).
		clear(extras)
		for _, a := range answers {
			if x, ok := parseRegistryExtra(a.Extra); ok && a.Err == nil && (a.Code == 1 || a.Code == 0) {
				extras[a.Index] = x
			}
		}
		valid := func(a redlock.MasterAnswer) bool {
			_, ok := extras[a.Index]
			return ok
		}
		for _, a := range admit(answers, fresh, valid, c.Quorum(), admitted) {
			// Recorded on the master, so that a daemon on this layout
			// started later (a restart) counts it too instead of waiting
			// until the repair + a registration's life + the max TTL (a
			// black-box pass restarted a daemon after three masters were
			// restarted empty one at a time: 503 for the max TTL while
			// /readyz said ready). Best effort: without the record a later
			// daemon admits from its own rounds, or waits.
			member := fmt.Sprintf("admitted %d %d %s", a.KeptSince.UnixMilli(), block.Milliseconds(), layout)
			actx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
			_, _ = c.RunQuorumScriptOn(actx, placementAdmitScript, a.Index, key, []any{member, a.KeptSince.Add(forgotten).UnixMilli()})
			cancel()
		}
		var addrs []redlock.MasterStatus
		addrOf := func(i int) string { // for the refusals' messages, read once a round at most
			if addrs == nil {
				addrs = c.Masters()
			}
			if i < len(addrs) {
				return addrs[i].Addr
			}
			return ""
		}
		for _, a := range answers {
			switch {
			case a.Err != nil:
				failures = append(failures, a.Err)
			case fresh(a):
				failures = append(failures, &redlock.MasterError{Index: a.Index, Addr: addrOf(a.Index), Err: fmt.Errorf("%w: repaired at %s: registrations may be lost there", redlock.ErrMasterQuarantined, a.KeptSince.UTC().Format(time.RFC3339))})
				if valid(a) {
					back = append(back, a.KeptSince.Add(forgotten).Sub(a.MasterTime))
				}
			case valid(a):
				back = append(back, 0)
				trusted++
				r.UntilMS = max(r.UntilMS, a.Value)
				r.WatchUntilMS = max(r.WatchUntilMS, extras[a.Index].watched)
				r.FreeMS = max(r.FreeMS, extras[a.Index].free)
				if a.Code == 1 {
					registered++
				}
			default:
				failures = append(failures, &redlock.MasterError{Index: a.Index, Addr: addrOf(a.Index), Err: fmt.Errorf("unexpected placement registry answer %d %q", a.Code, a.Extra)})
			}
		}
		r.OK = trusted >= c.Quorum()
		r.Registered = registered >= c.Quorum()
		if !r.OK {
			r.Err = &redlock.OutcomeError{Op: "placement", Kind: redlock.ErrQuorumUnavailable, Quorum: c.Quorum(), Masters: c.MasterCount(), Votes: trusted, Failures: failures}
			if len(back) >= c.Quorum() {
				// Repaired masters alone keep the quorum from counting: it
				// is back once the quorum-th of them is (a black-box pass
				// saw Retry-After count down to the quarantines' end, then
				// jump to the outage's backoff for ten health intervals).
				slices.Sort(back)
				r.Back = max(back[c.Quorum()-1], time.Millisecond)
			}
		}
		if gate.jump != nil && r.Registered && r.UntilMS > jumpedFor {
			// A layout that may not lock beside this one registered since
			// the last jump (or before this daemon started): its fences
			// first.
			jctx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
			err := gate.jump(jctx)
			cancel()
			if err != nil {
				r.OK, r.Registered = false, false
				r.Err = fmt.Errorf("raising the fencing counters above another layout's: %w", err)
			} else {
				jumpedFor = r.UntilMS
			}
		}
		gate.Seen(r)
		if seen != nil {
			seen(r)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
		}
	}
}

// The layout gate.
//
// The registry alone tells; it did not stop. A black-box pass paused
// (SIGSTOP) a daemon on the old groups during a change, ran the change to
// its end without it, and resumed it: it granted moved keys on the old
// groups while the daemons on the new groups granted them on the new ones,
// the same keys to two holders (3 runs of 3), though the new daemons'
// registrations were there for it to read. So every daemon grants and
// extends only under a permit from the registry:
//
//   - two layouts may lock side by side when they share a list of groups
//     that both lock every key in: a stable layout locks in its groups, a
//     moving one in its previous groups and in its current ones, all or
//     nothing (redlock/moving.go), so the old layout and the moving one
//     share the old groups, the moving one and the new one the new groups;
//     two lists of one group are one (placements.lua, shares);
//   - each round reads, on each master of the first group, the scores of
//     the layouts that may not lock beside this daemon's first, and
//     registers this daemon's layout there only if none of them + the max
//     TTL its daemons recorded with it is ahead of the master's clock
//     (placements.lua; the longest max TTL registered, ARGV[3], for a
//     registration that recorded none): a master lets a layout lock only
//     once every lock of every layout it may not lock beside may have
//     ended. Each registration records its daemon's own max TTL, which
//     bounds every lock it grants or extends (redlock.WithMaxTTL): with
//     the longest registered instead, one replica started with a day's
//     max TTL shut every daemon whose layout differed from one stopped a
//     minute before, for a day (a black-box pass);
//   - a round registered on a quorum of trusted masters (no repair within
//     a registration's life + the max TTL: one that lost a registration
//     counts again once it could no longer matter, or once admitted,
//     admit) gives a permit until
//     the round's send + the lease, half the registration's life
//     (placementAlive): a daemon
//     paused or cut off for longer holds none until a round registers
//     again;
//   - an acquire is refused (503) without a permit, and one that ends
//     after its permit ended (an acquire that waited) is released and
//     refused; an extend without a permit is refused.
//
// Claim: two daemons on layouts that may not lock side by side and share
// the first group never both hold a lock on one key granted or extended
// through them.
// Any two rounds that registered did so on quorums of the first group's
// masters, which share a master M that kept the earlier one's
// registration (or lost it too long ago to matter); on M the later
// round read the earlier one's score S (its master time + alive) with the
// max TTL b the earlier daemon recorded (or a longer one) and registered
// only when S + b ≤ its own time. The earlier daemon granted and extended
// under that round only before its send + lease (its monotonic clock),
// that is at least alive − lease (≥ 1 s) before S by M's clock, and each
// such lock ends b after it at the latest: before the later round ran, so
// before any grant under it. A registration that records no b (a daemon of
// the version before) is taken with the longest max TTL registered, which
// includes that daemon's, and a daemon that raises such a registration of
// its own layout keeps it first as a bound of that length, so that it
// still holds once the layout's score is raised. The argument is
// about one pair at a time, so it needs no order among layouts: a moving
// daemon that outlives its change (paused through it, left running, or
// started later with the step-1 config) is held off by the later change's
// daemons as a stale stable one is (a black-box pass resumed a daemon
// moving g0,g1 > g0,g1,g2 after a second change to g0,g2: ungated, it
// granted keys those daemons held, fences going back, 4 runs of 4). Not
// covered: layouts whose first groups differ
// (the registries are on other masters), a master whose clock runs more
// than alive − lease off the others', and a loss of the registry on
// masters that a later daemon counts (the registry's own limits above).
type PlacementGate struct {
	lease time.Duration
	// group is the first group's name for the refusals' errors ("" for a
	// masters list: one group, no name).
	group string
	// block is the longest max TTL registered on the masters
	// (placements.lua ARGV[3]): how long a lock of a daemon that recorded
	// no max TTL with its registration may stand after it ended, and how
	// long a repaired master may have lost a registration that matters.
	block func() time.Duration
	// maxTTL is this daemon's own max TTL, recorded with its
	// registrations (ARGV[5]): how long a lock it granted may stand after
	// its registration ended.
	maxTTL time.Duration
	kick   chan struct{} // a check asks the registry for a round now
	mu     sync.Mutex
	// permit is when the last registered round's permit ends (monotonic);
	// zero: none.
	permit time.Time
	// conflict: the last round a quorum answered did not register this
	// layout (a layout it may not lock beside may be locking); others is the latest
	// registration end of those layouts read (unix ms).
	conflict bool
	others   int64
	// free: until when a lock of those layouts may stand (unix ms;
	// PlacementReading.FreeMS).
	free int64
	// last is the send of the last round; lastOK whether a quorum
	// answered it. done is closed at the end of each round.
	last     time.Time
	lastOK   bool
	lastErr  error
	lastBack time.Duration
	done     chan struct{}
	once     sync.Once
	read     chan struct{} // closed after the first round
	// jump raises the fences before the first permit after another
	// layout it may not lock beside registered (SetFenceJump); nil: none.
	jump func(context.Context) error
}

// SetFenceJump makes the registry run jump (JumpFences over the daemon's
// groups) before a round that registered gives the first permit after
// the registration of a layout it may not lock beside was seen (any registered within
// the last day: the one it is newer than, once per such registration);
// a round whose jump fails gives no permit. Call it before
// RunPlacementRegistry starts.
func (g *PlacementGate) SetFenceJump(jump func(context.Context) error) { g.jump = jump }

// NewPlacementGate is the gate of a daemon registering every interval
// (RunPlacementRegistry) on its first group (named group; "" for a masters
// list) whose own max TTL is maxTTL: its registrations record it, and the
// daemons of other layouts are held off until its registration's end +
// maxTTL. block() is the longest max TTL registered on the masters: the
// bound for a registration that recorded none (a daemon of an earlier
// version), and for the registrations a repaired master may have lost.
func NewPlacementGate(interval time.Duration, group string, maxTTL time.Duration, block func() time.Duration) *PlacementGate {
	return &PlacementGate{lease: placementAlive(interval) / 2, group: group, maxTTL: maxTTL, block: block, kick: make(chan struct{}, 1),
		done: make(chan struct{}), read: make(chan struct{})}
}

// Seen takes one round of the registry (RunPlacementRegistry's seen).
func (g *PlacementGate) Seen(r PlacementReading) {
	g.mu.Lock()
	switch {
	case r.Registered:
		g.permit, g.conflict = r.Sent.Add(g.lease), false
	case r.OK:
		// A quorum answered and did not register this layout: a layout
		// it may not lock beside may be locking.
		g.permit, g.conflict = time.Time{}, true
	}
	if r.OK {
		g.others, g.free = r.UntilMS, r.FreeMS
	}
	g.last, g.lastOK, g.lastErr, g.lastBack = r.Sent, r.OK, r.Err, r.Back
	close(g.done)
	g.done = make(chan struct{})
	g.mu.Unlock()
	g.once.Do(func() { close(g.read) })
}

// verdict is the gate's answer from what it knows, when decided: nil to go
// on (a permit), a refusal (a layout it may not lock beside may be locking, or the
// last round, sent after the permit ended, heard no quorum of the first
// group: nothing shows that none is); not decided when a round sent after
// the permit ended is needed.
func (g *PlacementGate) verdict(now time.Time) (decided bool, err error) {
	switch {
	case now.Before(g.permit):
		return true, nil
	case g.conflict:
		return true, &PlacementConflictError{OthersUntil: g.others, FreeAt: g.free}
	case !g.lastOK && g.last.After(g.permit):
		cause := g.lastErr
		if cause != nil && g.group != "" {
			cause = &redlock.GroupError{Group: g.group, Err: cause}
		}
		pc := &PlacementConflictError{Cause: cause, Alive: 2 * g.lease}
		if g.lastBack > 0 {
			pc.BackAt = g.last.Add(g.lastBack)
		}
		return true, pc
	}
	return false, nil
}

// check returns nil when the daemon may grant or extend now (see
// verdict), after the first round (waited for, within ctx), and a
// *PlacementConflictError otherwise. A permit that ran out (a daemon
// paused or cut off) asks for a round at once and waits for one sent
// after it: the daemon learns what happened meanwhile before it grants.
func (g *PlacementGate) check(ctx context.Context) error {
	select {
	case <-g.read:
	case <-ctx.Done():
		return ctx.Err()
	}
	for range 3 {
		g.mu.Lock()
		decided, err := g.verdict(time.Now())
		done := g.done
		g.mu.Unlock()
		if decided {
			return err
		}
		select {
		case g.kick <- struct{}{}:
		default:
		}
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// Rounds that ended without a verdict were sent before the permit
	// ended: fail closed.
	return &PlacementConflictError{Cause: redlock.ErrQuorumUnavailable}
}

// admit admits, with the gate, the repaired masters of a round that
// could not have lost a registration still in force (fresh: repaired
// within a registration's life + the max TTL, and not yet admitted for
// that repair): when a quorum of the other masters count (kept their data,
// or were admitted) and none of them shows the registration of a layout
// the daemon's may not lock beside + the max TTL ahead of its clock (every
// one registered this round). A black-box pass restarted masters empty one at a time:
// each was repaired and back on the lock path within seconds, but the
// registry did not count it for a registration's life + the max TTL (a
// day by default), so the third restart within that time stopped every
// grant while /readyz showed five masters up.
//
// Why it is safe. Claim: a master that counts (kept, or admitted) holds
// every registration in force that was written on it. Kept masters do;
// let M be admitted at a round, and R a registration in force that M lost
// (R was written before M's repair). R gave its daemon a permit, so it is
// on a quorum Q of masters, and the masters that count in this round
// other than M are a quorum too: the two share a master S, which holds R
// (the claim, for the masters admitted earlier, by induction on
// admissions), so S showed R in force (answered 0) and M was not
// admitted. Registrations written on M after its repair are on M. So the
// gate's claim (the layout gate, above) holds with admitted masters
// counted as kept.
//
// Admissions are recorded on the admitted master (placements_admit.lua:
// the layout, the repair's time and the round's max TTL), and a daemon on
// the same layout whose max TTL is no longer counts a master admitted for
// its current repair (fresh, in RunPlacementRegistry): a restarted daemon
// would otherwise wait the time above out after three or more masters were
// repaired one at a time (a black-box pass: 503 for the max TTL after a
// rolling restart of the masters and a restart of the daemon, /readyz
// ready). Why that is safe: the claim above is about the registrations in
// force that a daemon on the admitting layout must see — those of layouts
// it may not lock beside, in force by its max TTL — and they are the same
// for every daemon on that layout, and fewer for one with a shorter max
// TTL; a later repair of the master changes its repair time, which no
// record then matches. A master that loses the record counts as before.
// A daemon on another layout admits from its own rounds. Not covered, as
// for the registry as a whole: a registration lost silently (no repair
// marker), and so a record.
//
// admit returns the masters admitted in this round.
func admit(answers []redlock.MasterAnswer, fresh, valid func(redlock.MasterAnswer) bool, quorum int, admitted map[int]time.Time) (now []redlock.MasterAnswer) {
	counting, ahead := 0, false
	for _, a := range answers {
		if valid(a) && !fresh(a) {
			counting++
			ahead = ahead || a.Code == 0
		}
	}
	if counting < quorum || ahead {
		return nil
	}
	for _, a := range answers {
		if valid(a) && fresh(a) {
			admitted[a.Index] = a.KeptSince
			now = append(now, a)
		}
	}
	return now
}

// PlacementConflictError is a grant or extend refused by the layout gate:
// a layout of master groups the daemon's may not lock beside registered
// until OthersUntil (unix ms by the masters' clocks), and a lock it granted may stand until
// FreeAt (that + the max TTL its daemons recorded); or, with Cause, the registry heard no
// quorum of the first group's masters since this daemon's permit ended
// (Cause says which did not count: a *redlock.OutcomeError, in a
// *redlock.GroupError naming the group when the daemon has groups). It
// matches redlock.ErrQuorumUnavailable (503, retry later) and Cause.
type PlacementConflictError struct {
	OthersUntil, FreeAt int64
	Cause               error
	// BackAt, with Cause, is when the registry counts a quorum again,
	// when that is known (PlacementReading.Back); zero otherwise. Alive
	// is a registration's life: a repaired master counts for the registry
	// that long after its quarantine (a registration it may have lost).
	BackAt time.Time
	Alive  time.Duration
}

func (e *PlacementConflictError) Error() string {
	if e.Cause != nil {
		return "placement: the placement registry heard no quorum of the first group's masters since this daemon's permit ended, so it grants and extends nothing: " + e.Cause.Error()
	}
	return fmt.Sprintf("placement: daemons on other master groups registered until %s, and a lock they granted may stand until %s (their max TTL later): this daemon grants and extends nothing until then; stop the daemons left on other groups (docs/operations.md, \"The layout gate\")",
		time.UnixMilli(e.OthersUntil).UTC().Format(time.RFC3339Nano), time.UnixMilli(e.FreeAt).UTC().Format(time.RFC3339Nano))
}

func (e *PlacementConflictError) Unwrap() []error {
	if e.Cause != nil {
		return []error{redlock.ErrQuorumUnavailable, e.Cause}
	}
	return []error{redlock.ErrQuorumUnavailable}
}

// ready is g's state for /readyz at now.
func (g *PlacementGate) ready(now time.Time) *readyGate {
	g.mu.Lock()
	decided, err := g.verdict(now)
	g.mu.Unlock()
	r := &readyGate{Granting: decided && err == nil}
	if err != nil {
		r.Refusal = err.Error()
	}
	return r
}

// Gate returns l with its acquires and extends under g.
func (g *PlacementGate) Gate(l MasterLocker) MasterLocker {
	gl := gatedLocker{MasterLocker: l, gate: g}
	if _, ok := l.(interface{ LockGroup(string) int }); ok {
		return gatedGroupsLocker{gl}
	}
	return gl
}

type gatedLocker struct {
	MasterLocker
	gate *PlacementGate
}

// Gate is the gate l is under (/readyz's gate).
func (g gatedLocker) Gate() *PlacementGate { return g.gate }

// gatedGroupsLocker keeps the groups' LockGroup (admission.go).
type gatedGroupsLocker struct{ gatedLocker }

func (g gatedGroupsLocker) LockGroup(key string) int {
	return g.MasterLocker.(interface{ LockGroup(string) int }).LockGroup(key)
}

// await is check for an acquire that may wait until giveUp (the end of
// its wait_ms; the zero time: one check): while the gate refuses, it waits
// for the registry's next round and asks again, until a permit, giveUp,
// stop (a shutdown) or ctx's end, and then answers the last refusal. A
// waiting acquire keeps waiting while no quorum can vote (docs/api.md,
// "Waiting"), the registry's quorum included: a black-box pass saw waits
// answered 503 at once after about 7 s of an outage (the gate's first
// refusal), though the masters came back within wait_ms.
func (g *PlacementGate) await(ctx context.Context, giveUp time.Time, stop <-chan struct{}) error {
	for {
		g.mu.Lock()
		done := g.done // the round after this check's verdict, at the latest
		g.mu.Unlock()
		err := g.check(ctx)
		left := time.Until(giveUp)
		if err == nil || ctx.Err() != nil || left <= 0 {
			return err
		}
		t := time.NewTimer(left)
		select {
		case <-done:
			t.Stop()
		case <-t.C:
			return err
		case <-stop:
			t.Stop()
			return err
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

func (g gatedLocker) Acquire(ctx context.Context, req AcquireRequest) (Lease, error) {
	var giveUp time.Time
	if req.Wait > 0 {
		giveUp = time.Now().Add(req.Wait)
	}
	for {
		if err := g.gate.await(ctx, giveUp, req.StopWaiting); err != nil {
			return Lease{}, err
		}
		r := req
		if req.Wait > 0 {
			// What is left of the wait after the gate's: at least one
			// attempt (Wait 0), as a wait that ends does.
			r.Wait = max(time.Until(giveUp), 0)
		}
		l, err := g.MasterLocker.Acquire(ctx, r)
		if err != nil {
			return l, err
		}
		err = g.gate.check(ctx)
		if err == nil {
			return l, nil
		}
		// The permit ended while the acquire waited: not granted.
		rctx := context.WithoutCancel(ctx)
		switch {
		case req.Keys != nil:
			_, _ = g.MasterLocker.ReleaseMulti(rctx, req.Keys, l.Token)
		case req.Permits > 0:
			_, _ = g.MasterLocker.Release(rctx, redlock.PermitKey(req.Key, l.Slot), l.Token)
		default:
			_, _ = g.MasterLocker.Release(rctx, req.Key, l.Token)
		}
		if req.Wait == 0 || !time.Now().Before(giveUp) || ctx.Err() != nil || stopped(req.StopWaiting) {
			return Lease{}, err
		}
		// Within the wait: wait for a permit again, and try again.
	}
}

// stopped reports whether stop (nil: never) is closed.
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

func (g gatedLocker) Extend(ctx context.Context, key, token string, ttl time.Duration) (Lease, error) {
	if err := g.gate.check(ctx); err != nil {
		return Lease{}, err
	}
	return g.MasterLocker.Extend(ctx, key, token, ttl)
}

func (g gatedLocker) ExtendMulti(ctx context.Context, keys []string, token string, ttl time.Duration) (Lease, error) {
	if err := g.gate.check(ctx); err != nil {
		return Lease{}, err
	}
	return g.MasterLocker.ExtendMulti(ctx, keys, token, ttl)
}
