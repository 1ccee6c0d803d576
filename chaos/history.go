package chaos

import (
	"slices"
	"sync"
	"time"
)

// Op is one lock call as a client saw it. Times are offsets from the start
// of the drill on the monotonic clock.
type Op struct {
	ID     int    `json:"id"`
	Client int    `json:"client"`
	Via    string `json:"via"` // "lib/a", "http/b": transport and view
	View   int    `json:"view"`
	Kind   string `json:"kind"` // "acquire", "release", "extend" or "status"
	Key    string `json:"key"`
	// Set: the keys of the multi-key lock this call took or released as
	// one, recorded as one Op per key (multikey.go); nil for one key.
	Set []string `json:"set,omitempty"`
	// Probe: an uncontended acquire of a fresh key (I5, I6).
	Probe bool `json:"probe,omitempty"`
	// Group: the attempts of one probe share it.
	Group  int           `json:"group,omitempty"`
	Invoke time.Duration `json:"invoke_ns"`
	Return time.Duration `json:"return_ns"`
	OK     bool          `json:"ok"`
	// Outcome classifies a failure: "held", "quorum", "not-held", "error".
	Outcome string `json:"outcome,omitempty"`
	Err     string `json:"err,omitempty"`
	// LockDelay is the lock-delay the acquire asked for (I8).
	LockDelay time.Duration `json:"lock_delay_ns,omitempty"`
	// Semaphore and Permits: an acquire of a permit of the semaphore
	// Semaphore of Permits permits (I7); Key is then its slot lock's,
	// redlock.PermitKey(Semaphore, slot), once granted.
	Semaphore string `json:"semaphore,omitempty"`
	Permits   int    `json:"permits,omitempty"`
	// Grant fields (acquire, OK): the fencing token and the end of
	// validity, conservative (never later than the truth).
	Fence      int64         `json:"fence,omitempty"`
	ValidUntil time.Duration `json:"valid_until_ns,omitempty"`
	TTL        time.Duration `json:"ttl_ns,omitempty"`
	// Held is a status call's answer (OK): the lock is held (I9).
	Held bool `json:"held,omitempty"`
	// Grant is, for a release or an extend, the ID of the acquire whose
	// lock it releases or extends. An extend that succeeded carries the new
	// ValidUntil.
	Grant int `json:"grant,omitempty"`
	// Bound is how long the call may take (I3); Excused marks a call a
	// fault delayed on purpose (a held reply), exempt from I3.
	Bound   time.Duration `json:"bound_ns"`
	Excused bool          `json:"excused,omitempty"`
	// PMT is the per-master timeout of whoever answered the call.
	PMT time.Duration `json:"pmt_ns"`
	// Unfinished marks a failed probe attempt after which the workload
	// stopped, so its probe got fewer attempts than a probe is owed
	// (prober): I5 does not judge such a probe.
	Unfinished bool `json:"unfinished,omitempty"`
}

// Latency is Return − Invoke.
func (o *Op) Latency() time.Duration { return o.Return - o.Invoke }

// Event is one fault injected or healed, for the report and the timeline.
type Event struct {
	At      time.Duration `json:"at_ns"`
	Done    time.Duration `json:"done_ns"` // when the injector call returned
	Kind    string        `json:"kind"`    // "fault", "heal", "settled", "note"
	What    string        `json:"what"`
	View    int           `json:"view"` // AllViews (-1) or the one view cut off
	Masters []int         `json:"masters,omitempty"`
}

// Recorder collects the history of one drill. It is safe for concurrent use.
type Recorder struct {
	start time.Time

	mu     sync.Mutex
	ops    []Op
	events []Event
	// Faulty intervals per (view, master): lower is [fault returned, heal
	// invoked) (the master is certainly broken), upper is [fault invoked,
	// settled) (it may be broken, or is not trusted again yet).
	lower, upper   map[faultKey][]span
	openLo, openUp map[faultKey]time.Duration
	stalls         []stall
}

// faultKey is a master as seen from a view (AllViews: from every view).
type faultKey struct{ view, master int }

type span struct{ from, to time.Duration }

// NewRecorder starts the drill clock.
func NewRecorder() *Recorder {
	return &Recorder{
		start: time.Now(),
		lower: map[faultKey][]span{}, upper: map[faultKey][]span{},
		openLo: map[faultKey]time.Duration{}, openUp: map[faultKey]time.Duration{},
	}
}

// Now is the drill clock.
func (r *Recorder) Now() time.Duration { return time.Since(r.start) }

// At converts a time with a monotonic reading to the drill clock.
func (r *Recorder) At(t time.Time) time.Duration { return t.Sub(r.start) }

// Add records op and returns its ID.
func (r *Recorder) Add(op Op) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	op.ID = len(r.ops) + 1
	r.ops = append(r.ops, op)
	return op.ID
}

// Unfinished marks Op id, a failed probe attempt, as the last its probe
// made before the workload stopped (see Op.Unfinished).
func (r *Recorder) Unfinished(id int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id >= 1 && id <= len(r.ops) {
		r.ops[id-1].Unfinished = true
	}
}

// Excuse marks Op id as delayed on purpose by a fault (exempt from I3).
func (r *Recorder) Excuse(id int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id >= 1 && id <= len(r.ops) {
		r.ops[id-1].Excused = true
	}
}

// Note records an event that is not a fault.
func (r *Recorder) Note(what string) {
	now := r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, Event{At: now, Done: now, Kind: "note", What: what})
}

// Faulted records that masters were broken, as seen from view (or
// AllViews), by a fault invoked at `at` whose injection returned at done.
func (r *Recorder) Faulted(what string, view int, at, done time.Duration, masters ...int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, Event{At: at, Done: done, Kind: "fault", What: what, View: view, Masters: masters})
	for _, m := range masters {
		k := faultKey{view, m}
		if _, open := r.openUp[k]; !open {
			r.openUp[k] = at
		}
		if _, open := r.openLo[k]; !open {
			r.openLo[k] = done
		}
	}
}

// Healing records that the repair of masters was invoked at `at`.
func (r *Recorder) Healing(what string, view int, at, done time.Duration, masters ...int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, Event{At: at, Done: done, Kind: "heal", What: what, View: view, Masters: masters})
	for _, m := range masters {
		k := faultKey{view, m}
		if from, open := r.openLo[k]; open {
			r.lower[k] = append(r.lower[k], span{from, at})
			delete(r.openLo, k)
		}
	}
}

// Settled records that every client counts masters again.
func (r *Recorder) Settled(at time.Duration, view int, masters ...int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, Event{At: at, Done: at, Kind: "settled", What: "counting again", View: view, Masters: masters})
	for _, m := range masters {
		k := faultKey{view, m}
		if from, open := r.openLo[k]; open { // settled without an explicit heal
			r.lower[k] = append(r.lower[k], span{from, at})
			delete(r.openLo, k)
		}
		if from, open := r.openUp[k]; open {
			r.upper[k] = append(r.upper[k], span{from, at})
			delete(r.openUp, k)
		}
	}
}

// Stalled records that master m did not answer a PING within the
// per-master timeout over [from, to], whatever the reason. Every stall
// counts as a fault of m for I5 (a master that cannot answer in time
// cannot vote in time, and a client that saw it time out counts it down
// until its next probe: see CheckParams.HealGrace), never for I6; those
// that no injected fault explains are reported (History.Unexplained).
func (r *Recorder) Stalled(m int, from, to time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stalls = append(r.stalls, stall{m, span{from, to}})
}

type stall struct {
	master int
	span
}

// History is what a drill recorded.
type History struct {
	Ops    []Op
	Events []Event
	Writes []Write
	// End is when recording stopped.
	End time.Duration
	// Lower and Upper are the faulty intervals (see Recorder).
	Lower, Upper map[faultKey][]span
	// Unexplained are the stalls (see Recorder.Stalled) of masters that
	// no injected fault covered: the machine, not the drill, froze them.
	Unexplained []Stall
}

// Stall is a master that did not answer PINGs within the per-master
// timeout, with no injected fault to explain it.
type Stall struct {
	Master int           `json:"master"`
	From   time.Duration `json:"from_ns"`
	To     time.Duration `json:"to_ns"`
}

// History closes the open fault intervals at now and returns a copy.
func (r *Recorder) History(writes []Write) History {
	now := r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	h := History{
		Ops: slices.Clone(r.ops), Events: slices.Clone(r.events), Writes: writes, End: now,
		Lower: map[faultKey][]span{}, Upper: map[faultKey][]span{},
	}
	for k, s := range r.lower {
		h.Lower[k] = slices.Clone(s)
	}
	for k, s := range r.upper {
		h.Upper[k] = slices.Clone(s)
	}
	for k, from := range r.openLo {
		h.Lower[k] = append(h.Lower[k], span{from, now})
	}
	for k, from := range r.openUp {
		h.Upper[k] = append(h.Upper[k], span{from, now})
	}
	// A stall is explained when an injected fault of that master (seen
	// from any view) covers it, with a second of grace either side for
	// the master to stop and start answering.
	injected := map[int][]span{}
	for k, ss := range h.Upper {
		injected[k.master] = append(injected[k.master], ss...)
	}
	stalls := slices.Clone(r.stalls)
	slices.SortFunc(stalls, func(a, b stall) int {
		if a.master != b.master {
			return a.master - b.master
		}
		return int(a.from - b.from)
	})
	// Every stall counts as a fault for I5, from every view.
	for _, st := range stalls {
		k := faultKey{AllViews, st.master}
		h.Upper[k] = append(h.Upper[k], st.span)
	}
	var un []Stall
	for _, st := range stalls {
		explained := false
		for _, s := range injected[st.master] {
			if s.from-time.Second <= st.from && st.to <= s.to+time.Second {
				explained = true
				break
			}
		}
		if explained {
			continue
		}
		if n := len(un); n > 0 && un[n-1].Master == st.master && st.from-un[n-1].To < 200*time.Millisecond {
			un[n-1].To = max(un[n-1].To, st.to)
			continue
		}
		un = append(un, Stall{Master: st.master, From: st.from, To: st.to})
	}
	h.Unexplained = un
	for k, ss := range h.Upper {
		h.Upper[k] = mergeSpans(ss)
	}
	for k, ss := range h.Lower {
		h.Lower[k] = mergeSpans(ss)
	}
	return h
}

// mergeSpans sorts spans and merges those that overlap or lie within
// 100ms of each other (consecutive failed PINGs of a stalled master).
func mergeSpans(ss []span) []span {
	ss = slices.Clone(ss)
	slices.SortFunc(ss, func(a, b span) int { return int(a.from - b.from) })
	var out []span
	for _, s := range ss {
		if n := len(out); n > 0 && s.from <= out[n-1].to+100*time.Millisecond {
			out[n-1].to = max(out[n-1].to, s.to)
			continue
		}
		out = append(out, s)
	}
	return out
}

// faultyAt counts the masters faulty for view at t: broken for every view
// or for this one.
func faultyAt(spans map[faultKey][]span, view int, t time.Duration) int {
	faulty := map[int]bool{}
	for k, ss := range spans {
		if k.view != AllViews && k.view != view {
			continue
		}
		for _, s := range ss {
			if s.from <= t && t < s.to {
				faulty[k.master] = true
				break
			}
		}
	}
	return len(faulty)
}

// maxFaulty is the largest number of masters faulty for view at any moment
// of [from, to].
func maxFaulty(spans map[faultKey][]span, view int, from, to time.Duration) int {
	n := faultyAt(spans, view, from)
	for _, ss := range spans {
		for _, s := range ss {
			if s.from > from && s.from <= to {
				n = max(n, faultyAt(spans, view, s.from))
			}
		}
	}
	return n
}

// minFaulty is the smallest number of masters faulty for view at any
// moment of [from, to].
func minFaulty(spans map[faultKey][]span, view int, from, to time.Duration) int {
	n := faultyAt(spans, view, from)
	for _, ss := range spans {
		for _, s := range ss {
			if s.to > from && s.to <= to {
				n = min(n, faultyAt(spans, view, s.to))
			}
		}
	}
	return n
}
