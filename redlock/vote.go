package redlock

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Codes of the vote scripts (vote_prelude.lua) shared by acquire, extend
// and status.
const (
	codeLost int64 = -2 // the master lost its data: marker, horizon or counter missing
)

// voteReply is one master's answer to a vote script: the script's own
// result, and what the prelude read on the master in the same atomic step.
type voteReply struct {
	code, value int64
	extra       string    // status: the token's SHA-1
	marker      string    // the marker's value, "" when missing
	time        time.Time // the master's TIME when the script ran
	horizon     int64     // the lease horizon before the script, unix ms by the master's clock
	raised      int64     // the lease horizon after the script
	counter     int64     // the fencing counter; -1 when fencing is off
}

// parseVote decodes the prelude's one-string reply (vote_prelude.lua):
// "code value sec usec horizon horizonAfter counter markerLength marker
// extra", fields separated by one space, the marker markerLength bytes
// long (it holds spaces) and extra the rest. It allocates nothing: marker
// and extra are substrings of v. The INFO statistics are not in it: they
// come with the reply, from the batch's reading (reply.stats,
// batchstats.go). ok is false for any other shape, or a clock of 0.
func parseVote(v any) (r voteReply, ok bool) {
	s, isStr := v.(string)
	if !isStr {
		return voteReply{}, false
	}
	var f [8]int64
	s, sep, ok := cutInts(s, f[:])
	if !ok || !sep {
		return voteReply{}, false
	}
	if f[7] < 0 || f[7] > int64(len(s)) {
		return voteReply{}, false
	}
	r = voteReply{
		code: f[0], value: f[1],
		time:    time.Unix(f[2], f[3]*int64(time.Microsecond)),
		horizon: f[4], raised: f[5], counter: f[6],
		marker: s[:f[7]], extra: s[f[7]:],
	}
	return r, f[2] > 0
}

// cutInts parses the len(f) decimal integers at the start of s, separated
// by one space, into f: the one-string replies of the vote and fence
// scripts (parseVote, parseFenceReply). rest is what follows the last
// one's space; sep reports whether that space was there (a vote's reply
// goes on with the marker; a fence reply ends).
func cutInts(s string, f []int64) (rest string, sep, ok bool) {
	for i := range f {
		field, after, found := strings.Cut(s, " ")
		if !found && i < len(f)-1 {
			return "", false, false
		}
		n, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return "", false, false
		}
		f[i], s, sep = n, after, found
	}
	return s, sep, true
}

// Why a vote that arrived was not counted; each is wrapped in a
// *MasterError and matches ErrMasterQuarantined.
var (
	// ErrMasterDataLost: the master no longer has the deployment's state
	// (marker, lease horizon or fencing counter), its marker was replaced,
	// or it evicted keys: it may have lost locks it granted.
	ErrMasterDataLost = fmt.Errorf("%w: lost its data", ErrMasterQuarantined)
	// ErrMasterClockJump: the master's clock, read in the same script as
	// its vote, moved forward by more than the measurement allows since the
	// last reading: its keys may have expired early.
	ErrMasterClockJump = fmt.Errorf("%w: its clock jumped", ErrMasterQuarantined)
	// ErrMasterClockUnknown: no recent reading of the master's clock to
	// check the vote's clock against (its probes are too slow or failing).
	ErrMasterClockUnknown = fmt.Errorf("%w: its clock was not verified recently or precisely enough", ErrMasterQuarantined)
	errBadReply           = errors.New("unexpected script reply")
	// errNoStatsReading: the vote's batch had no INFO stats reading after
	// it (failed or unparsable), so nothing shows the master evicted
	// nothing before the vote (batchstats.go). The vote does not count.
	errNoStatsReading = errors.New("no statistics reading after the vote's batch")
)

// judgeVote is the one ladder every vote reply goes through (acquire,
// extend, status): a transport or Redis error, a reply that does not
// parse, a vote the per-vote guards refuse (checkVote), a master that does
// not count. parsed reports whether v holds the master's answer (callers
// that read evidence from any master that answered, counting or not, use
// it); err is nil only when the vote counts, and otherwise a
// *MasterError (or the reply's own error) for OutcomeError.Failures.
func (c *Client) judgeVote(r reply) (v voteReply, parsed bool, err error) {
	if r.err != nil {
		return voteReply{}, false, masterErr(c, r)
	}
	m := c.masters[r.idx]
	v, parsed = parseVote(r.val)
	if !parsed {
		return voteReply{}, false, &MasterError{Index: r.idx, Addr: m.addr, Err: errBadReply}
	}
	if err := m.checkVote(v, r); err != nil {
		return v, true, &MasterError{Index: r.idx, Addr: m.addr, Err: err}
	}
	if err := m.notCounting(); err != nil {
		return v, true, &MasterError{Index: r.idx, Addr: m.addr, Err: err}
	}
	return v, true, nil
}

// checkVote runs the per-vote guards on a vote script's answer v from m,
// delivered in r: its pipeline was written at r.sent and answered at
// r.at, and r.stats is the INFO stats reading the lane took after the
// batch's votes (batchstats.go). It returns nil when
// the vote may count (if m counts at all), or why not. A master found to
// have lost its data or to have jumped its clock is quarantined here, in
// the same round trip as the vote, not at the next health probe.
func (m *master) checkVote(v voteReply, r reply) error {
	o := &m.c.opts
	if o.dataLossGuard {
		gen, exp := m.st.inc.repairGen.Load(), m.st.inc.expectedMarker.Load()
		if exp == nil {
			// Not through the marker rule yet (first probe round, or a
			// brand-new deployment's marker not written): it does not vote.
			return ErrMasterQuarantined
		}
		if r.gen != gen {
			// The generation and its marker as one pair (expectMarker
			// changes both under lossMu): read apart, a generation just
			// begun could come with the marker it replaces, and a vote
			// that read that older marker would pass for one of the
			// new generation.
			m.st.inc.lossMu.Lock()
			gen, exp = m.st.inc.repairGen.Load(), m.st.inc.expectedMarker.Load()
			m.st.inc.lossMu.Unlock()
		}
		if r.gen != gen && v.marker != *exp || v.time.UnixMilli() < m.st.inc.repairedAt.Load() {
			// Sent before the master's last repair (or its marker was
			// first known) and not carrying that repair's marker: it may
			// have run before the repair's write and says nothing about
			// now. The generation decides where the clocks cannot: a vote
			// in the repair's own millisecond. A vote that read the
			// repair's own marker (each carries a nonce) ran after that
			// write, however early it was sent, and is judged in the
			// repair's generation: refusing it made every acquire in
			// flight as a probe adopted `redlockd repair-fences`' markers
			// fail on the masters it had found intact (CI: three of five
			// refused, 503 right after the run).
			return ErrMasterQuarantined
		}
		seen := sighting{by: "a vote", gen: gen}
		if v.code == codeLost {
			m.lostDataSeen(seen.gen, LossStateMissing, "data lost without restart: marker, lease horizon or fencing counter missing (seen by a vote)")
			return ErrMasterDataLost
		}
		if !m.markerMatches(v.marker, v.time, &seen) {
			return ErrMasterDataLost
		}
		if !r.stats.ok {
			// No reading after the vote: nothing shows that the master
			// evicted nothing before the vote ran (fail closed).
			return errNoStatsReading
		}
		if !m.evictionsUnchanged(r.stats.evicted, sighting{by: "a vote's batch reading", gen: seen.gen}) {
			return ErrMasterDataLost
		}
		if !m.countersGrow(counterRead{horizon: v.horizon, raised: v.raised, counter: v.counter}, v.time, seen) {
			return ErrMasterDataLost
		}
		if !m.commandsGrow(r.stats.commands, r.stats.at, sighting{by: "a vote's batch reading", gen: seen.gen}) {
			return ErrMasterDataLost
		}
	}
	if o.clockGuard && o.voteClockGuard {
		return m.checkVoteClock(v.time, r.sent, r.at)
	}
	return nil
}
