package daemon

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// The 503 quorum_unavailable answer: why no quorum voted, and when to
// retry.
//
// An *redlock.OutcomeError lists only the masters heard from before the
// outcome was decided: an acquire stops as soon as a quorum is out of
// reach, so with every master out it reports three failures of five. The
// masters it does not mention are classified from the health snapshot
// (MasterHealth.Masters), so that the counts in the message add up to every
// master.

// masterFate is why one master did not help a quorum.
type masterFate uint8

const (
	fateDown      masterFate = iota // known down, or the connection failed
	fateOOM                         // answered, but refuses writes
	fateExcluded                    // answered, but its vote does not count
	fateTimedOut                    // no answer in time (paused, slow)
	fateNotWaited                   // healthy as far as known; the outcome was decided before its answer
	numFates
)

var fateNames = [numFates]string{
	" down",
	" refusing writes (OOM: used memory above maxmemory; see /readyz)",
	" not counted (quarantined, repairing or waiting; see /readyz)",
	" timed out",
	" healthy (not waited for: the outcome was settled before they answered)",
}

// failureFate classifies one per-master failure of a fan-out.
func failureFate(err error) masterFate {
	switch {
	case errors.Is(err, redlock.ErrMasterOOM):
		return fateOOM
	case errors.Is(err, redlock.ErrMasterQuarantined):
		return fateExcluded
	case errors.Is(err, redlock.ErrMasterTimeout), errors.Is(err, redlock.ErrMasterBusy):
		return fateTimedOut
	default:
		return fateDown // known down, or a connection error: refused, reset, unreachable
	}
}

// snapshotFate classifies a master the outcome does not mention from its
// health snapshot; ok is false for a master that counts (it may have been
// one of the votes).
func snapshotFate(st *redlock.MasterStatus) (masterFate, bool) {
	switch st.State {
	case redlock.MasterDown:
		return fateDown, true
	case redlock.MasterRepairing, redlock.MasterWaiting, redlock.MasterQuarantined:
		return fateExcluded, true
	case redlock.MasterOOM:
		return fateOOM, true
	}
	return 0, false
}

// quorumTally is one failed fan-out, master by master.
type quorumTally struct {
	oe      *redlock.OutcomeError
	failed  map[int]error // by master index, the first failure reported
	fates   [numFates]int
	unnamed int // failures not tied to a master (validity used up)
}

func tallyQuorum(oe *redlock.OutcomeError, masters []redlock.MasterStatus) *quorumTally {
	t := &quorumTally{oe: oe, failed: map[int]error{}}
	for _, f := range oe.Failures {
		var me *redlock.MasterError
		if !errors.As(f, &me) {
			t.unnamed++
			continue
		}
		if _, seen := t.failed[me.Index]; !seen {
			t.failed[me.Index] = f
			t.fates[failureFate(f)]++
		}
	}
	// The masters neither voting, refusing nor failing were not waited for.
	rest := oe.Masters - oe.Votes - oe.Refused - len(t.failed)
	for i := range masters {
		if rest <= 0 {
			break
		}
		if _, seen := t.failed[i]; seen {
			continue
		}
		if f, ok := snapshotFate(&masters[i]); ok {
			t.fates[f]++
			rest--
		}
	}
	if rest > 0 {
		t.fates[fateNotWaited] += rest
	}
	return t
}

// quorumMessage says why no quorum voted, every master counted once:
// "no quorum of Redis masters could vote in time (3 of 5 needed; 1 voted,
// 2 down, 2 not counted (quarantined, repairing or waiting; see
// /readyz))". Quarantined masters answer; the message must not blame time
// when they are the reason. masters is the health snapshot (nil when not
// known).
func quorumMessage(err error, masters []redlock.MasterStatus) string {
	var oe *redlock.OutcomeError
	if !errors.As(err, &oe) || oe.Masters == 0 {
		return "no quorum of Redis masters could vote in time"
	}
	if oe.Op == "status" {
		return fmt.Sprintf("cannot tell whether the lock is held: %d master(s) hold it, %d answered it is free, %d could not answer or do not count (%d of %d needed either way)",
			oe.Votes, oe.Refused, oe.Masters-oe.Votes-oe.Refused, oe.Quorum, oe.Masters)
	}
	if errors.Is(err, redlock.ErrFenceExhausted) {
		return fmt.Sprintf("a quorum of Redis masters voted (%d of %d, %d needed), but no fencing token is left: the fencing counter has reached the largest fence, %d (set by hand near it?); every acquire is refused",
			oe.Votes, oe.Masters, oe.Quorum, redlock.MaxFence)
	}
	if oe.Votes >= oe.Quorum {
		// Acquire and extend: a quorum voted, but the validity was used up
		// before it did, or too few stored the fencing token.
		return fmt.Sprintf("a quorum of Redis masters voted (%d of %d, %d needed), but too late to leave the lock any validity or with too few storing its fencing token",
			oe.Votes, oe.Masters, oe.Quorum)
	}
	t := tallyQuorum(oe, masters)
	b := []byte("no quorum of Redis masters could vote in time (")
	b = strconv.AppendInt(b, int64(oe.Quorum), 10)
	b = append(b, " of "...)
	b = strconv.AppendInt(b, int64(oe.Masters), 10)
	b = append(b, " needed"...)
	sep := "; "
	part := func(n int, what string) {
		if n > 0 {
			b = append(b, sep...)
			b = strconv.AppendInt(b, int64(n), 10)
			b = append(b, what...)
			sep = ", "
		}
	}
	part(oe.Votes, " voted")
	part(oe.Refused, " answered no")
	for f, n := range t.fates {
		part(n, fateNames[f])
	}
	return string(append(b, ')'))
}

// quorumReturn is how long until a quorum of masters can vote again, when
// that is known: a master that answered or counts returns now, one whose
// quarantine runs out returns when it does; a master that is down, timed
// out, refuses writes, awaits a repair or a clock check has no known
// return. The quorum-th earliest return is the answer, when a quorum of
// masters have one; false otherwise, as promising a time then would
// promise what a master that may never come back has to deliver.
//
// sooner is how many masters have no known return when they, with those
// that count now, could make a quorum before that time (0 otherwise):
// such a master may be back in a second (a paused one beside quarantined
// ones), so the time is a bound, not the wait — quorumAnswer then says
// "or sooner" and answers the outage's backoff, as record actions do
// (idemQuorumFailed), instead of the quarantines' end.
func quorumReturn(err error, masters []redlock.MasterStatus, quorum int) (back time.Duration, known bool, sooner int) {
	var oe *redlock.OutcomeError
	if !errors.As(err, &oe) || quorum <= 0 || errors.Is(err, redlock.ErrFenceExhausted) {
		return 0, false, 0 // no fencing token left: no return to promise
	}
	t := tallyQuorum(oe, masters)
	if oe.Op == "status" {
		return statusReturn(oe, t, masters, quorum)
	}
	var ends []time.Duration
	for i := range masters {
		st := &masters[i]
		quarantineEnd := st.State == redlock.MasterQuarantined && st.QuarantineLeft > 0
		if f, failed := t.failed[i]; failed {
			// Only an excluded vote can have a known end: its quarantine.
			if failureFate(f) == fateExcluded && quarantineEnd {
				ends = append(ends, st.QuarantineLeft)
			}
			continue
		}
		switch {
		case st.Counting && st.State == redlock.MasterUp:
			ends = append(ends, 0)
		case quarantineEnd:
			ends = append(ends, st.QuarantineLeft)
		}
	}
	if len(ends) < quorum {
		return 0, false, 0
	}
	slices.Sort(ends)
	back = ends[quorum-1]
	if back > 0 {
		now := 0 // masters that count now
		for now < len(ends) && ends[now] == 0 {
			now++
		}
		if unknown := len(masters) - len(ends); now+unknown >= quorum {
			sooner = unknown
		}
	}
	return back, true, sooner
}

// statusReturn is quorumReturn for a status, which decides with a quorum
// of answers on one side (held, or free), not with a quorum of masters
// counting: three counting masters that split one held, two free cannot
// tell. It can decide once quorum − max(held, free) more masters answer,
// and not before; which side they answer is not known, so the time is the
// earliest a decision can come: when that many of the masters that did
// not answer count again, their quarantines over. A master with no known
// return (down, timed out, repairing, waiting) may come back sooner
// (sooner, as for a vote); when the masters with a known return are too
// few without such masters, no time is known. Found by a black-box pass:
// with a quorum counting but split, the answer said no return was known
// while the two quarantined masters that could decide had theirs.
func statusReturn(oe *redlock.OutcomeError, t *quorumTally, masters []redlock.MasterStatus, quorum int) (back time.Duration, known bool, sooner int) {
	need := quorum - max(oe.Votes, oe.Refused)
	if need <= 0 {
		return 0, true, 0
	}
	var ends []time.Duration
	unknown, ready := 0, 0
	for i := range masters {
		st := &masters[i]
		f, failed := t.failed[i]
		quarantineEnd := st.State == redlock.MasterQuarantined && st.QuarantineLeft > 0
		switch {
		case quarantineEnd && (!failed || failureFate(f) == fateExcluded):
			ends = append(ends, st.QuarantineLeft)
		case failed:
			unknown++
		case st.Counting && st.State == redlock.MasterUp:
			ready++ // answered, or can answer now
		default:
			unknown++
		}
	}
	// The counting masters beyond those that answered can answer now.
	for range max(ready-oe.Votes-oe.Refused, 0) {
		ends = append(ends, 0)
	}
	if len(ends) < need {
		return 0, false, 0
	}
	slices.Sort(ends)
	back = ends[need-1]
	if back > 0 && unknown > 0 {
		now := 0
		for now < len(ends) && ends[now] == 0 {
			now++
		}
		if now+unknown >= need {
			sooner = unknown
		}
	}
	return back, true, sooner
}

// quorumAnswer is the message and the Retry-After of a 503
// quorum_unavailable. When a quorum's return is known (quarantines running
// out) the message says when and Retry-After is that (at most
// maxRetryAfter), so that callers do not retry every second for hours;
// otherwise the message says no time is known and Retry-After is the
// outage's backoff.
func (s *Server) quorumAnswer(err error, now time.Time) (string, time.Duration) {
	retry := s.outage.backoff(now)
	var pc *PlacementConflictError
	gated := errors.As(err, &pc)
	if gated && pc.Cause == nil {
		// The layout gate: when the other layout's locks end is known.
		if pc.FreeAt > 0 {
			retry = min(max(time.UnixMilli(pc.FreeAt).Sub(now), time.Second), maxRetryAfter)
		}
		return pc.Error(), retry
	}
	health, prefix := s.health, ""
	if name, h, ok := groupOf(s.health, err); ok {
		// The key's own group: its masters, its quorum.
		health, prefix = h, "master group "+name+": "
	}
	masters := health.Masters()
	if gated {
		// The layout gate, for want of the registry's quorum: which
		// masters of the first group did not count.
		prefix = "placement registry: " + prefix
	}
	msg := prefix + quorumMessage(err, masters)
	if gated && !pc.BackAt.IsZero() {
		// Repaired masters count for the registry a registration's life
		// after their quarantine: the registry's own return, not the
		// quarantines' (quorumReturn would say none, or too soon).
		d := max(time.Until(pc.BackAt).Round(time.Second), time.Second)
		retry = min(d, maxRetryAfter)
		return msg + fmt.Sprintf("; the registry counts a quorum again in %v, once a registration the repaired masters may have lost and the max TTL after it have run out; retry in %d s", d, retry/time.Second), retry
	}
	d, ok, sooner := quorumReturn(err, masters, health.Quorum())
	if gated && !ok {
		// The masters the registry did not count because they were
		// repaired count for the lock path already: when a quorum does,
		// the registry counts them within a registration's life.
		counting := 0
		for i := range masters {
			if masters[i].Counting && masters[i].State == redlock.MasterUp {
				counting++
			}
		}
		if counting >= health.Quorum() {
			d, ok, sooner = 0, true, 0
		}
	}
	if gated && ok {
		// The registry counts a repaired master a registration's life
		// after its quarantine: the quarantines' end is not the gate's.
		d += pc.Alive
	}
	if ok && d > 0 {
		d = max(d.Round(time.Second), time.Second)
		if sooner > 0 {
			retry = min(retry, d, maxRetryAfter)
			return msg + fmt.Sprintf("; a quorum is expected back in %v, when quarantines end, or sooner when the %d master(s) down or not answering come back; retry in %d s", d, sooner, retry/time.Second), retry
		}
		retry = min(d, maxRetryAfter)
		return msg + fmt.Sprintf("; a quorum is expected back in %v, when quarantines end; retry in %d s", d, retry/time.Second), retry
	}
	return msg + "; no time is known for a quorum to be back, as the masters counted above have no known return; retry later", retry
}
