package chaos

// The checker and the recorder on small hand-made histories: each test
// builds the few operations that make (or must not make) one violation.

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

const sec = time.Second

// granted is a successful acquire of key by client with fence, invoked at
// inv, returned at ret and valid until valid.
func granted(id, client int, key string, fence int64, inv, ret, valid time.Duration) Op {
	return Op{ID: id, Client: client, Via: "lib/a", Kind: "acquire", Key: key, OK: true,
		Fence: fence, Invoke: inv, Return: ret, ValidUntil: valid, Bound: sec}
}

// release is client's release of grant g at inv.
func release(id, client, g int, key string, inv time.Duration) Op {
	return Op{ID: id, Client: client, Via: "lib/a", Kind: "release", Key: key, OK: true,
		Grant: g, Invoke: inv, Return: inv + 10*time.Millisecond, Bound: sec}
}

// sections are accepted begin and commit writes of grants on key.
func sections(key string, ws ...Write) []Write {
	for i := range ws {
		ws[i].Key, ws[i].OK = key, true
	}
	return ws
}

func checkCounts(h History) map[string]int {
	return Count(Check(h, CheckParams{Masters: 5, FastSlack: 300 * time.Millisecond}))
}

func TestCheckCleanRun(t *testing.T) {
	h := History{
		Ops: []Op{
			granted(1, 1, "k", 1, 0, 10*time.Millisecond, 1*sec),
			release(2, 1, 1, "k", 500*time.Millisecond),
			granted(3, 2, "k", 2, 600*time.Millisecond, 610*time.Millisecond, 2*sec),
			release(4, 2, 3, "k", 900*time.Millisecond),
		},
		Writes: sections("k",
			Write{Fence: 1, Client: 1, Grant: 1, Phase: "begin", At: 20 * time.Millisecond},
			Write{Fence: 1, Client: 1, Grant: 1, Phase: "commit", At: 400 * time.Millisecond},
			Write{Fence: 2, Client: 2, Grant: 3, Phase: "begin", At: 620 * time.Millisecond},
			Write{Fence: 2, Client: 2, Grant: 3, Phase: "commit", At: 800 * time.Millisecond},
		),
		End: 3 * sec,
	}
	assert.Empty(t, checkCounts(h))
}

func TestCheckOverlap(t *testing.T) {
	// Client 1 holds k until 1s (no release); client 2 is granted it at
	// 510ms: I1. Fences increase, so I2 holds.
	h := History{Ops: []Op{
		granted(1, 1, "k", 1, 0, 10*time.Millisecond, 1*sec),
		granted(2, 2, "k", 2, 500*time.Millisecond, 510*time.Millisecond, 1500*time.Millisecond),
	}, End: 2 * sec}
	vs := Check(h, CheckParams{Masters: 5})
	assert.Equal(t, map[string]int{I1: 1}, Count(vs))
	assert.Equal(t, []int{1, 2}, vs[0].Ops)

	// The same grant after client 1's release is no overlap.
	h.Ops = append(h.Ops, release(3, 1, 1, "k", 400*time.Millisecond))
	assert.Empty(t, checkCounts(h))
}

// extended is client's extend of grant g, invoked at inv, that succeeded
// with validity until valid.
func extended(id, client, g int, key string, inv, valid time.Duration) Op {
	return Op{ID: id, Client: client, Via: "lib/a", Kind: "extend", Key: key, OK: true,
		Grant: g, Invoke: inv, Return: inv + 10*time.Millisecond, ValidUntil: valid, Bound: sec}
}

func TestCheckOverlapWithAnExtendedLease(t *testing.T) {
	// Client 1's lock, valid until 1s, is extended at 500ms to 3s; client
	// 2 is granted it at 2s: I1, though the first validity had ended.
	h := History{Ops: []Op{
		granted(1, 1, "k", 1, 0, 10*time.Millisecond, 1*sec),
		extended(2, 1, 1, "k", 500*time.Millisecond, 3*sec),
		granted(3, 2, "k", 2, 2*sec-10*time.Millisecond, 2*sec, 3*sec),
	}, End: 4 * sec}
	vs := Check(h, CheckParams{Masters: 5})
	assert.Equal(t, map[string]int{I1: 1}, Count(vs))
	assert.Equal(t, []int{1, 3}, vs[0].Ops)

	// A failed extend, or one sent after the validity had ended, moves
	// nothing.
	h.Ops[1].OK = false
	assert.Empty(t, checkCounts(h))
	h.Ops[1].OK, h.Ops[1].Invoke = true, 1500*time.Millisecond
	assert.Empty(t, checkCounts(h))
}

func TestCheckFenceGoesBack(t *testing.T) {
	// Grant 2 was invoked after grant 1 returned, but has the lower fence.
	h := History{Ops: []Op{
		granted(1, 1, "k", 7, 0, 10*time.Millisecond, 100*time.Millisecond),
		granted(2, 2, "k", 5, 200*time.Millisecond, 210*time.Millisecond, 300*time.Millisecond),
	}, End: sec}
	vs := Check(h, CheckParams{Masters: 5})
	assert.Equal(t, map[string]int{I2: 1}, Count(vs))
	assert.Contains(t, vs[0].Detail, "fence went backwards")

	// Concurrent grants (neither returned before the other was invoked)
	// may carry fences in either order.
	h.Ops[1].Invoke = 5 * time.Millisecond
	h.Ops[1].Return, h.Ops[1].ValidUntil = 210*time.Millisecond, 300*time.Millisecond
	h.Ops[0].ValidUntil = 200 * time.Millisecond
	assert.Empty(t, checkCounts(h))
}

func TestCheckStaleWrite(t *testing.T) {
	// The resource accepted fence 3 after fence 5: a stale write, however
	// the grants looked to the clients.
	h := History{Writes: sections("k",
		Write{Fence: 5, Client: 1, Grant: 1, Phase: "begin", At: 100 * time.Millisecond},
		Write{Fence: 3, Client: 2, Grant: 2, Phase: "begin", At: 200 * time.Millisecond},
	), End: sec}
	vs := Check(h, CheckParams{Masters: 5})
	assert.Equal(t, map[string]int{I2: 1}, Count(vs))
	assert.Contains(t, vs[0].Detail, "stale write")

	// Two sections that both committed and overlap are a violation too,
	// even with increasing fences.
	h.Writes = sections("k",
		Write{Fence: 1, Client: 1, Grant: 1, Phase: "begin", At: 100 * time.Millisecond},
		Write{Fence: 2, Client: 2, Grant: 2, Phase: "begin", At: 150 * time.Millisecond},
		Write{Fence: 1, Client: 1, Grant: 1, Phase: "commit", At: 200 * time.Millisecond},
		Write{Fence: 2, Client: 2, Grant: 2, Phase: "commit", At: 250 * time.Millisecond},
	)
	vs = Check(h, CheckParams{Masters: 5})
	// fence 1's commit after fence 2's begin is also stale.
	assert.Equal(t, map[string]int{I2: 2}, Count(vs))
}

// failedProbe is one failed single-attempt uncontended acquire through view 0.
func failedProbe(id int, inv time.Duration) Op {
	return Op{ID: id, Client: 9, Via: "http/a", View: 0, Kind: "acquire", Key: "probe", Probe: true, Group: id,
		Invoke: inv, Return: inv + 60*time.Millisecond, Outcome: "quorum", Err: "3 of 5 needed", Bound: sec,
		PMT: 50 * time.Millisecond}
}

func TestCheckLivenessAfterHealAndStall(t *testing.T) {
	rec := NewRecorder()
	// Masters 3 and 4 cut off from view 0 over [1s, 5s), every client
	// counting them again at 5.1s; the PING monitor saw masters 0 and 1
	// stall over [5.12s, 5.2s], and masters 0, 1 and 2 over [8s, 8.08s].
	rec.Faulted("cut", 0, 1*sec, 1*sec+5*time.Millisecond, 3, 4)
	rec.Healing("heal", 0, 5*sec, 5*sec+5*time.Millisecond, 3, 4)
	rec.Settled(5100*time.Millisecond, 0, 3, 4)
	for _, m := range []int{0, 1} {
		rec.Stalled(m, 5120*time.Millisecond, 5200*time.Millisecond)
	}
	for _, m := range []int{0, 1, 2} {
		rec.Stalled(m, 8*sec, 8080*time.Millisecond)
	}
	h := rec.History(nil)
	h.Ops = []Op{
		failedProbe(1, 3*sec),                 // 3 and 4 faulty: tolerated, must succeed
		failedProbe(2, 5150*time.Millisecond), // 0 and 1 stalled; 3 and 4 just settled
		failedProbe(3, 7*sec),                 // nothing faulty
		failedProbe(4, 8100*time.Millisecond), // 20ms after three masters stalled
		failedProbe(5, 8000*time.Millisecond), // while three masters stalled
	}
	ids := func(vs []Violation) []int {
		var out []int
		for _, v := range vs {
			out = append(out, v.Ops[0])
		}
		return out
	}
	params := CheckParams{Masters: 5, FastSlack: 300 * time.Millisecond}

	// No grace: a stall counts while the monitor saw it, however short
	// (probe 5), and a healed master counts once it settled (probe 2: two
	// faulty, a violation).
	assert.Equal(t, []int{1, 2, 3, 4}, ids(Check(h, params)))

	// With one health interval plus the per-master timeout of grace, a
	// client may still count a master down that far after it settled or
	// its stall ended: probes 2 and 4 saw more than two masters faulty.
	params.HealGrace = time.Second + 50*time.Millisecond
	assert.Equal(t, []int{1, 3}, ids(Check(h, params)))
}

func TestRecorderHistory(t *testing.T) {
	rec := NewRecorder()
	// Master 1 killed at the start and never healed: its intervals stay
	// open until the history is taken (the recorder's clock, milliseconds
	// after NewRecorder here). Master 2 paused and healed.
	rec.Faulted("kill", AllViews, 0, 0, 1)
	rec.Faulted("pause", AllViews, 2*sec, 2010*time.Millisecond, 2)
	rec.Healing("resume", AllViews, 4*sec, 4010*time.Millisecond, 2)
	rec.Settled(4200*time.Millisecond, AllViews, 2)
	// Stalls: master 2 inside its pause (explained, with a second of
	// grace after the heal), master 0 with no fault (unexplained; two
	// PINGs 50ms apart are one stall).
	rec.Stalled(2, 4500*time.Millisecond, 4600*time.Millisecond)
	rec.Stalled(0, 6*sec, 6060*time.Millisecond)
	rec.Stalled(0, 6110*time.Millisecond, 6170*time.Millisecond)
	h := rec.History(nil)

	all := func(m int) faultKey { return faultKey{AllViews, m} }
	// Lower: from the fault's return to the heal's invocation (or the end).
	assert.Equal(t, []span{{2010 * time.Millisecond, 4 * sec}}, h.Lower[all(2)])
	assert.Equal(t, []span{{0, h.End}}, h.Lower[all(1)], "an open fault lasts until the end")
	assert.Equal(t, []span{{0, h.End}}, h.Upper[all(1)])
	// Upper: from the fault's invocation to settling, plus the stalls.
	assert.Equal(t, []span{{2 * sec, 4200 * time.Millisecond}, {4500 * time.Millisecond, 4600 * time.Millisecond}}, h.Upper[all(2)])
	assert.Equal(t, []span{{6 * sec, 6170 * time.Millisecond}}, h.Upper[all(0)])
	assert.Equal(t, []Stall{{Master: 0, From: 6 * sec, To: 6170 * time.Millisecond}}, h.Unexplained)

	assert.Equal(t, 1, faultyAt(h.Upper, 0, 3*sec))
	assert.Equal(t, 0, minFaulty(h.Lower, 0, 3*sec, 5*sec), "master 2 healed at 4s")
	assert.Equal(t, 1, maxFaulty(h.Lower, 0, 500*time.Millisecond, 3*sec))
}

// TestCheckI6FastFailAndMachineStalls: with three masters faulty, a probe
// that takes longer than twice the per-master timeout plus FastSlack to
// fail is a violation, unless a stall of the machine the PING monitor saw
// (a master no injected fault covered) overlapped it.
func TestCheckI6FastFailAndMachineStalls(t *testing.T) {
	rec := NewRecorder()
	rec.Faulted("kill", AllViews, 0, 0, 0, 1, 2)
	rec.Healing("restart", AllViews, 8*sec, 8*sec, 0, 1, 2)
	rec.Stalled(3, 5*sec, 5300*time.Millisecond) // master 3 has no fault: the machine
	slowFail := func(id int, inv time.Duration) Op {
		return Op{ID: id, Client: 1, Via: "lib/a", Kind: "acquire", Key: "probe", Probe: true, Group: id,
			Invoke: inv, Return: inv + 450*time.Millisecond, Outcome: "quorum", Bound: sec, PMT: 50 * time.Millisecond}
	}
	h := rec.History(nil)
	h.Ops = []Op{slowFail(1, 2*sec), slowFail(2, 4900*time.Millisecond), slowFail(3, 5200*time.Millisecond), slowFail(4, 7*sec)}
	h.End = 8 * sec
	var ids []int
	for _, v := range Check(h, CheckParams{Masters: 5, FastSlack: 300 * time.Millisecond}) {
		if v.Invariant == I6 {
			ids = append(ids, v.Ops...)
		}
	}
	assert.Equal(t, []int{1, 4}, ids, "only the slow failures no machine stall overlapped")
}

// TestCheckI5SkipsUnfinishedProbes: a probe whose workload stopped after
// one failed attempt (the end of a row) got fewer attempts than a probe is
// owed and is not judged; the same probe finished is.
func TestCheckI5SkipsUnfinishedProbes(t *testing.T) {
	h := History{Ops: []Op{failedProbe(1, 2*sec), failedProbe(2, 3*sec)}, End: 4 * sec}
	h.Ops[1].Unfinished = true
	var ids []int
	for _, v := range Check(h, CheckParams{Masters: 5, FastSlack: 300 * time.Millisecond}) {
		if v.Invariant == I5 {
			ids = append(ids, v.Ops[0])
		}
	}
	assert.Equal(t, []int{1}, ids)
}

// permit is a granted permit of the semaphore sem of n permits, held on
// slot, as granted() makes a lock.
func permit(id, client int, sem string, n, slot int, fence int64, inv, ret, valid time.Duration) Op {
	op := granted(id, client, sem+"#permit:"+string(rune('0'+slot)), fence, inv, ret, valid)
	op.Semaphore, op.Permits = sem, n
	return op
}

func TestCheckSemaphoreHolders(t *testing.T) {
	ms := time.Millisecond
	// Two permits: two holders on two slots, a third after one released.
	ok := History{Ops: []Op{
		permit(1, 1, "s", 2, 0, 1, 0, 10*ms, sec),
		permit(2, 2, "s", 2, 1, 2, 5*ms, 20*ms, sec),
		release(3, 1, 1, "s#permit:0", 300*ms),
		permit(4, 3, "s", 2, 0, 3, 310*ms, 320*ms, sec),
	}, End: 2 * sec}
	assert.Empty(t, checkCounts(ok))

	// Three holders of two permits at once, each on a key of its own (as
	// the counting control grants them): I7 alone sees it.
	over := History{Ops: []Op{
		permit(1, 1, "s", 2, 0, 1, 0, 10*ms, sec),
		permit(2, 2, "s", 2, 1, 2, 5*ms, 20*ms, sec),
		permit(3, 3, "s", 2, 2, 3, 30*ms, 40*ms, sec),
	}, End: 2 * sec}
	assert.Equal(t, map[string]int{I7: 1}, checkCounts(over))

	// The same three, the first released before the third: fine.
	over.Ops = append(over.Ops, release(4, 1, 1, "s#permit:0", 25*ms))
	assert.Empty(t, checkCounts(over))
}

// TestCheckPermitSlotFences: a permit is recorded under its slot lock's
// key, so I2 judges fences per slot: on one slot they must increase, while
// holders of different slots at once are I7's to count, not I1's.
func TestCheckPermitSlotFences(t *testing.T) {
	ms := time.Millisecond
	ok := History{Ops: []Op{
		permit(1, 1, "s", 2, 0, 5, 0, 10*ms, sec),
		permit(2, 2, "s", 2, 1, 6, 5*ms, 20*ms, sec),
		release(3, 1, 1, "s#permit:0", 300*ms),
		permit(4, 3, "s", 2, 0, 7, 310*ms, 320*ms, sec),
	}, End: 2 * sec}
	assert.Empty(t, checkCounts(ok))

	// Slot 0 granted again after its release with a fence below the
	// first holder's: I2 on that slot, and nothing else.
	back := History{Ops: slices.Clone(ok.Ops), End: 2 * sec}
	back.Ops[3].Fence = 4
	vs := Check(back, CheckParams{Masters: 5, FastSlack: 300 * time.Millisecond})
	assert.Equal(t, map[string]int{I2: 1}, Count(vs))
	assert.Equal(t, "s#permit:0", vs[0].Key)
}

func TestCheckLockDelay(t *testing.T) {
	ms := time.Millisecond
	held := granted(1, 1, "k", 1, 0, 10*ms, 990*ms)
	held.TTL, held.LockDelay = sec, 2*sec
	// TTL 1s + delay 2s from 0, less 1% drift: nothing before 2.97s.
	early := granted(2, 2, "k", 2, 1100*ms, 1110*ms, 2100*ms)
	late := granted(2, 2, "k", 2, 2980*ms, 2990*ms, 3900*ms)
	check := func(ops ...Op) map[string]int {
		return Count(Check(History{Ops: ops, End: 5 * sec}, CheckParams{Masters: 5, FastSlack: 300 * ms, DriftFactor: 0.01}))
	}
	assert.Equal(t, map[string]int{I8: 1}, check(held, early), "granted inside the delay")
	assert.Empty(t, check(held, late), "granted after the delay")
	// A release, even a late one that found the lock expired, ends it.
	assert.Empty(t, check(held, release(3, 1, 1, "k", 1050*ms), early))
	// An extend moves the delay with the lock.
	ext := Op{ID: 4, Client: 1, Via: "lib/a", Kind: "extend", Key: "k", Grant: 1, OK: true, TTL: sec, Invoke: 500 * ms, Return: 510 * ms, ValidUntil: 1490 * ms, Bound: sec}
	assert.Equal(t, map[string]int{I8: 1}, check(held, ext, late), "the extended delay runs to 3.465s")
	// No delay asked: no I8.
	held.LockDelay = 0
	assert.Empty(t, check(held, early))
}

// TestCheckStatusCallsAHeldLockFree: I9 judges a status answer of "free"
// against the leases of its key: inside one it is a violation; one that
// began before the grant returned, ended after the lease (released or
// out of validity), answered held, failed, or asked about another key is
// not.
func TestCheckStatusCallsAHeldLockFree(t *testing.T) {
	ms := time.Millisecond
	held := granted(1, 1, "k", 1, 0, 10*ms, 990*ms)
	status := func(id int, key string, inv, ret time.Duration, ok, isHeld bool) Op {
		return Op{ID: id, Client: 2, Via: "http/b", Kind: "status", Key: key, OK: ok, Held: isHeld, Invoke: inv, Return: ret, Bound: sec}
	}
	check := func(ops ...Op) map[string]int {
		return Count(Check(History{Ops: ops, End: 3 * sec}, CheckParams{Masters: 5, FastSlack: 300 * ms}))
	}
	vs := Check(History{Ops: []Op{held, status(2, "k", 100*ms, 120*ms, true, false)}, End: 3 * sec}, CheckParams{Masters: 5, FastSlack: 300 * ms})
	assert.Equal(t, map[string]int{I9: 1}, Count(vs), "free inside the lease")
	if len(vs) == 0 {
		return
	}
	assert.Equal(t, []int{1, 2}, vs[0].Ops)
	assert.Empty(t, check(held, status(2, "k", 100*ms, 120*ms, true, true)), "held")
	assert.Empty(t, check(held, status(2, "k", 100*ms, 120*ms, false, false)), "could not tell (503)")
	assert.Empty(t, check(held, status(2, "other", 100*ms, 120*ms, true, false)), "another key")
	assert.Empty(t, check(held, status(2, "k", 5*ms, 20*ms, true, false)), "began before the grant returned")
	assert.Empty(t, check(held, status(2, "k", 980*ms, 1000*ms, true, false)), "ended after validity")
	assert.Empty(t, check(held, release(3, 1, 1, "k", 400*ms), status(2, "k", 405*ms, 420*ms, true, false)), "after the release was sent")
	// An extend moves the lease's end: free after the first validity
	// but inside the extended one is a violation.
	ext := Op{ID: 4, Client: 1, Via: "lib/a", Kind: "extend", Key: "k", Grant: 1, OK: true, TTL: sec, Invoke: 500 * ms, Return: 510 * ms, ValidUntil: 1490 * ms, Bound: sec}
	assert.Equal(t, map[string]int{I9: 1}, check(held, ext, status(2, "k", 1000*ms, 1020*ms, true, false)), "inside the extended lease")
}
