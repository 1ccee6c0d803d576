package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Invariants checked over a drill's History:
//
//	I1 no two grants of one key whose [grant returned, min(release invoked,
//	   end of validity, as its extends moved it)] intervals overlap;
//	I2 fences strictly increase in real-time order (a grant that returned
//	   before another was invoked has the lower fence), and the Resource
//	   accepted no stale write: per key its accepted fences never go down,
//	   an equal fence comes from the same grant, and no two committed
//	   critical sections overlap;
//	I3 every call answered within its bound;
//	I4 no lock key survives its TTL on any master (a sweep after the drill);
//	I5 with at most N − quorum masters faulty, an uncontended acquire
//	   succeeds (a probe: up to three single attempts). Liveness is judged
//	   against what the daemon could know: a master counts as faulty from
//	   the fault until every client counts it again, or until a stall the
//	   PING monitor saw ended, plus CheckParams.HealGrace. A probe the end
//	   of the row cut short (Op.Unfinished) is not judged;
//	I6 with more faulty, no acquire succeeds, and single attempts fail fast
//	   (within twice the per-master timeout plus FastSlack), unless a
//	   stall of the machine (History.Unexplained) overlapped the attempt;
//	I7 no more than N grants of permits of one semaphore of N permits
//	   hold at once: their leases (as in I1, each a slot lock's) never
//	   number more than N at any moment, counted per semaphore name from
//	   the history, not from the slots;
//	I8 a grant with a lock-delay D that was not released keeps its key
//	   from every other grant until D after its lock ended: no grant of the
//	   key returns between the end of its lease and the earliest its delay
//	   record can end on a master, (TTL + D)·(1 − drift factor) after the
//	   acquire was invoked (or after its last successful extend was, with
//	   the extend's TTL). A release invoked meanwhile ends the delay.
//	I9 a status never calls a held lock free: no status call that answered
//	   "free" ran wholly inside a grant's lease (as in I1) of its key. A
//	   status that cannot tell must fail (503, ErrQuorumUnavailable), and
//	   one that overlaps the lease's start or end is not judged.
const (
	I1 = "I1"
	I2 = "I2"
	I3 = "I3"
	I4 = "I4"
	I5 = "I5"
	I6 = "I6"
	I7 = "I7"
	I8 = "I8"
	I9 = "I9"
)

// StaleRejected is the observation a "pause the holder" control must make:
// the Resource rejected a stale fence.
const StaleRejected = "stale-write-rejected"

// Violation is one broken invariant.
type Violation struct {
	Invariant string `json:"invariant"`
	Key       string `json:"key,omitempty"`
	Detail    string `json:"detail"`
	Ops       []int  `json:"ops,omitempty"`
}

// Leftover is a lock key found on a master by the sweep.
type Leftover struct {
	Master int           `json:"master"`
	Key    string        `json:"key"`
	PTTL   time.Duration `json:"pttl_ns"` // -1: no expiry
}

// CheckParams are what the checker needs beyond the History.
type CheckParams struct {
	Masters   int
	FastSlack time.Duration
	Leftovers []Leftover
	// HealGrace is how long after a master was healed (it settled) or a
	// stall of it ended it still counts as faulty for I5: a client learns
	// that a master answers again from its next health probe, up to one
	// health interval later, and that probe may take the per-master
	// timeout. The drills set it to HealthInterval + PerMasterTimeout.
	HealGrace time.Duration
	// DriftFactor is the clients' clock drift allowance (I8).
	DriftFactor float64
	// MaxPerInvariant caps how many violations of one invariant are listed
	// (the count is still exact in the summary line). Default 20.
	MaxPerInvariant int
	// Groups, with master groups: the masters of each group (indices
	// below Masters), and GroupOf, the group index of an Op's key. I5 and
	// I6 then judge each acquire by its key's group alone: its faulty
	// masters against its quorum. Nil: one group of Masters masters.
	Groups  [][]int
	GroupOf func(key string) int
}

// groupScope is, per master group, the fault spans of its masters and
// their number: what I5 and I6 judge an acquire of a key on that group by.
type groupScope struct {
	spans []map[faultKey][]span
	size  []int
	of    func(key string) int
}

func (p CheckParams) scope(spans map[faultKey][]span) groupScope {
	if len(p.Groups) == 0 || p.GroupOf == nil {
		return groupScope{spans: []map[faultKey][]span{spans}, size: []int{p.Masters}, of: func(string) int { return 0 }}
	}
	gs := groupScope{of: p.GroupOf}
	for _, ms := range p.Groups {
		sub := map[faultKey][]span{}
		for k, ss := range spans {
			if slices.Contains(ms, k.master) {
				sub[k] = ss
			}
		}
		gs.spans = append(gs.spans, sub)
		gs.size = append(gs.size, len(ms))
	}
	return gs
}

// forKey returns the fault spans and the number of masters of key's group.
func (g groupScope) forKey(key string) (map[faultKey][]span, int) {
	i := g.of(key)
	return g.spans[i], g.size[i]
}

// Check returns every violation of I1–I9 in h.
func Check(h History, p CheckParams) []Violation {
	if p.MaxPerInvariant == 0 {
		p.MaxPerInvariant = 20
	}
	var out []Violation
	for _, f := range []func(History, CheckParams) []Violation{checkI1, checkI2, checkResource, checkI3, checkI4, checkI5, checkI6, checkI7, checkI8, checkI9} {
		vs := f(h, p)
		if len(vs) > p.MaxPerInvariant {
			extra := len(vs) - p.MaxPerInvariant
			vs = append(vs[:p.MaxPerInvariant], Violation{Invariant: vs[0].Invariant, Detail: fmt.Sprintf("… and %d more", extra)})
		}
		out = append(out, vs...)
	}
	return out
}

// Count returns how many violations of each invariant vs holds, counting
// the "… and N more" lines.
func Count(vs []Violation) map[string]int {
	n := map[string]int{}
	for _, v := range vs {
		var extra int
		if _, err := fmt.Sscanf(v.Detail, "… and %d more", &extra); err == nil {
			n[v.Invariant] += extra
			continue
		}
		n[v.Invariant]++
	}
	return n
}

// lease is a grant's interval for I1.
type lease struct {
	op         *Op
	start, end time.Duration
}

// leases returns, per key, the grants' [returned, min(release invoked,
// validity end)] intervals, non-empty ones only, sorted by start. A
// successful extend sent while the lease still ran moves its validity end
// to the extend's (never earlier: an extend never shortens a lock).
func leases(h History) map[string][]lease {
	releases := map[int]time.Duration{}
	extends := map[int][]*Op{}
	for i := range h.Ops {
		switch op := &h.Ops[i]; op.Kind {
		case "release":
			releases[op.Grant] = op.Invoke
		case "extend":
			if op.OK {
				extends[op.Grant] = append(extends[op.Grant], op)
			}
		}
	}
	out := map[string][]lease{}
	for i := range h.Ops {
		op := &h.Ops[i]
		if op.Kind != "acquire" || !op.OK {
			continue
		}
		end := op.ValidUntil
		exts := extends[op.ID]
		slices.SortFunc(exts, func(a, b *Op) int { return cmp.Compare(a.Invoke, b.Invoke) })
		for _, e := range exts {
			if e.Invoke < end {
				end = max(end, e.ValidUntil)
			}
		}
		if r, ok := releases[op.ID]; ok {
			end = min(end, r)
		}
		if end > op.Return {
			out[op.Key] = append(out[op.Key], lease{op, op.Return, end})
		}
	}
	for _, ls := range out {
		slices.SortFunc(ls, func(a, b lease) int { return cmp.Compare(a.start, b.start) })
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func checkI1(h History, _ CheckParams) []Violation {
	var out []Violation
	ls := leases(h)
	for _, key := range sortedKeys(ls) {
		var open []lease // leases whose end is after the current start
		for _, l := range ls[key] {
			kept := open[:0]
			for _, o := range open {
				if o.end > l.start {
					kept = append(kept, o)
				}
			}
			open = kept
			for _, o := range open {
				out = append(out, Violation{
					Invariant: I1, Key: key, Ops: []int{o.op.ID, l.op.ID},
					Detail: fmt.Sprintf("client %d (%s, fence %d) held %s until %s but client %d (%s, fence %d) was granted it at %s: %s of overlap",
						o.op.Client, o.op.Via, o.op.Fence, key, fmtAt(o.end), l.op.Client, l.op.Via, l.op.Fence, fmtAt(l.start), (o.end - l.start).Round(time.Millisecond)),
				})
			}
			open = append(open, l)
		}
	}
	return out
}

func checkI2(h History, _ CheckParams) []Violation {
	var out []Violation
	grants := map[string][]*Op{}
	for i := range h.Ops {
		if op := &h.Ops[i]; op.Kind == "acquire" && op.OK && !op.Probe {
			grants[op.Key] = append(grants[op.Key], op)
		}
	}
	for _, key := range sortedKeys(grants) {
		gs := grants[key]
		byReturn := slices.Clone(gs)
		slices.SortFunc(byReturn, func(a, b *Op) int { return cmp.Compare(a.Return, b.Return) })
		// prefix[i] is the op with the highest fence among byReturn[:i+1].
		prefix := make([]*Op, len(byReturn))
		for i, g := range byReturn {
			prefix[i] = g
			if i > 0 && prefix[i-1].Fence >= g.Fence {
				prefix[i] = prefix[i-1]
			}
		}
		for _, g := range gs {
			// grants that returned strictly before g was invoked
			n := sort.Search(len(byReturn), func(i int) bool { return byReturn[i].Return >= g.Invoke })
			if n == 0 {
				continue
			}
			if best := prefix[n-1]; best.Fence >= g.Fence {
				out = append(out, Violation{
					Invariant: I2, Key: key, Ops: []int{best.ID, g.ID},
					Detail: fmt.Sprintf("fence went backwards: client %d was granted %s with fence %d at %s, after client %d had been granted fence %d at %s",
						g.Client, key, g.Fence, fmtAt(g.Return), best.Client, best.Fence, fmtAt(best.Return)),
				})
			}
		}
	}
	return out
}

// checkResource re-checks the Resource's log (I2, "accepted no stale
// write"), independently of its own bookkeeping.
func checkResource(h History, _ CheckParams) []Violation {
	var out []Violation
	type sect struct {
		begin, commit *Write
	}
	top := map[string]*Write{}
	sections := map[string]map[int]*sect{}
	for i := range h.Writes {
		w := &h.Writes[i]
		if !w.OK {
			continue
		}
		if t := top[w.Key]; t != nil && (w.Fence < t.Fence || (w.Fence == t.Fence && w.Grant != t.Grant)) {
			out = append(out, Violation{
				Invariant: I2, Key: w.Key, Ops: []int{t.Grant, w.Grant},
				Detail: fmt.Sprintf("resource accepted a stale write: fence %d (client %d) after fence %d (client %d)", w.Fence, w.Client, t.Fence, t.Client),
			})
		}
		if t := top[w.Key]; t == nil || w.Fence >= t.Fence {
			top[w.Key] = w
		}
		if sections[w.Key] == nil {
			sections[w.Key] = map[int]*sect{}
		}
		s := sections[w.Key][w.Grant]
		if s == nil {
			s = &sect{}
			sections[w.Key][w.Grant] = s
		}
		switch w.Phase {
		case "begin":
			s.begin = w
		case "commit":
			s.commit = w
		}
	}
	for _, key := range sortedKeys(sections) {
		var done []*sect
		for _, s := range sections[key] {
			if s.begin != nil && s.commit != nil {
				done = append(done, s)
			}
		}
		slices.SortFunc(done, func(a, b *sect) int { return cmp.Compare(a.begin.At, b.begin.At) })
		for i := 1; i < len(done); i++ {
			a, b := done[i-1], done[i]
			if b.begin.At < a.commit.At {
				out = append(out, Violation{
					Invariant: I2, Key: key, Ops: []int{a.begin.Grant, b.begin.Grant},
					Detail: fmt.Sprintf("two committed critical sections overlap on the resource: fence %d [%s, %s] and fence %d from %s",
						a.begin.Fence, fmtAt(a.begin.At), fmtAt(a.commit.At), b.begin.Fence, fmtAt(b.begin.At)),
				})
			}
		}
	}
	return out
}

func checkI3(h History, _ CheckParams) []Violation {
	var out []Violation
	for i := range h.Ops {
		op := &h.Ops[i]
		if op.Excused || op.Latency() <= op.Bound {
			continue
		}
		out = append(out, Violation{
			Invariant: I3, Key: op.Key, Ops: []int{op.ID},
			Detail: fmt.Sprintf("%s %s by client %d (%s) took %v, bound %v", op.Kind, op.Key, op.Client, op.Via, op.Latency().Round(time.Millisecond), op.Bound),
		})
	}
	return out
}

func checkI4(_ History, p CheckParams) []Violation {
	var out []Violation
	for _, l := range p.Leftovers {
		ttl := "no expiry"
		if l.PTTL >= 0 {
			ttl = "PTTL " + l.PTTL.String()
		}
		out = append(out, Violation{Invariant: I4, Key: l.Key, Detail: fmt.Sprintf("master %d still holds %s (%s) after every TTL has passed", l.Master, l.Key, ttl)})
	}
	return out
}

func checkI5(h History, p CheckParams) []Violation {
	type probe struct {
		first, last *Op
		ok          bool
		unfinished  bool
	}
	probes := map[int]*probe{}
	var order []int
	for i := range h.Ops {
		op := &h.Ops[i]
		if !op.Probe || op.Kind != "acquire" {
			continue
		}
		pr := probes[op.Group]
		if pr == nil {
			pr = &probe{first: op}
			probes[op.Group] = pr
			order = append(order, op.Group)
		}
		pr.last = op
		pr.ok = pr.ok || op.OK
		pr.unfinished = pr.unfinished || op.Unfinished
	}
	scope := p.scope(extendSpans(h.Upper, p.HealGrace))
	var out []Violation
	for _, g := range order {
		pr := probes[g]
		if pr.ok || pr.unfinished {
			continue
		}
		// The attempts of a probe take fresh keys, of one group or
		// several: judged by the group of its last attempt.
		upper, masters := scope.forKey(pr.last.Key)
		tolerated := masters - (masters/2 + 1)
		if n := maxFaulty(upper, pr.first.View, pr.first.Invoke, pr.last.Return); n <= tolerated {
			out = append(out, Violation{
				Invariant: I5, Key: pr.last.Key, Ops: []int{pr.first.ID, pr.last.ID},
				Detail: fmt.Sprintf("uncontended acquire through %s failed with %d master(s) faulty (≤ %d tolerated) at %s: %s",
					pr.last.Via, n, tolerated, fmtAt(pr.first.Invoke), pr.last.Err),
			})
		}
	}
	return out
}

func checkI6(h History, p CheckParams) []Violation {
	scope := p.scope(h.Lower)
	var out []Violation
	for i := range h.Ops {
		op := &h.Ops[i]
		if op.Kind != "acquire" {
			continue
		}
		lower, masters := scope.forKey(op.Key)
		needed := masters/2 + 1
		if n := minFaulty(lower, op.View, op.Invoke, op.Return); n <= masters-needed {
			continue
		}
		if op.OK {
			out = append(out, Violation{
				Invariant: I6, Key: op.Key, Ops: []int{op.ID},
				Detail: fmt.Sprintf("client %d (%s) was granted %s at %s while more than %d masters of its group were faulty", op.Client, op.Via, op.Key, fmtAt(op.Return), masters-needed),
			})
			continue
		}
		if fast := 2*op.PMT + p.FastSlack; op.Probe && op.Latency() > fast && !stalledDuring(h.Unexplained, op.Invoke, op.Return) {
			out = append(out, Violation{
				Invariant: I6, Key: op.Key, Ops: []int{op.ID},
				Detail: fmt.Sprintf("acquire through %s with no quorum possible took %v to fail (fast bound %v)", op.Via, op.Latency().Round(time.Millisecond), fast),
			})
		}
	}
	return out
}

// stalledDuring reports whether a stall of the machine (a master no
// injected fault covered, slow to answer the PING monitor) overlapped
// [from, to]: a slow failure then measures the machine, not the daemon.
func stalledDuring(stalls []Stall, from, to time.Duration) bool {
	for _, s := range stalls {
		if s.From <= to && from <= s.To {
			return true
		}
	}
	return false
}

// extendSpans returns spans with every interval's end moved grace later.
func extendSpans(spans map[faultKey][]span, grace time.Duration) map[faultKey][]span {
	out := make(map[faultKey][]span, len(spans))
	for k, ss := range spans {
		ext := make([]span, len(ss))
		for i, s := range ss {
			ext[i] = span{s.from, s.to + grace}
		}
		out[k] = ext
	}
	return out
}

func fmtAt(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }

// checkI7 counts, per semaphore name, the leases of its permits (each the
// lease of one slot lock) at every lease's start: a start that makes more
// than the semaphore's permits is a violation.
func checkI7(h History, _ CheckParams) []Violation {
	type sem struct {
		permits int
		leases  []lease
	}
	sems := map[string]*sem{}
	for _, ls := range leases(h) {
		for _, l := range ls {
			if l.op.Semaphore == "" {
				continue
			}
			s := sems[l.op.Semaphore]
			if s == nil {
				s = &sem{permits: l.op.Permits}
				sems[l.op.Semaphore] = s
			}
			s.permits = min(s.permits, l.op.Permits)
			s.leases = append(s.leases, l)
		}
	}
	var out []Violation
	for _, name := range sortedKeys(sems) {
		s := sems[name]
		slices.SortFunc(s.leases, func(a, b lease) int { return cmp.Compare(a.start, b.start) })
		var open []lease
		for _, l := range s.leases {
			kept := open[:0]
			for _, o := range open {
				if o.end > l.start {
					kept = append(kept, o)
				}
			}
			open = append(kept, l)
			if len(open) <= s.permits {
				continue
			}
			ids := make([]int, len(open))
			var who []string
			for i, o := range open {
				ids[i] = o.op.ID
				who = append(who, fmt.Sprintf("client %d (%s, %s, fence %d, until %s)", o.op.Client, o.op.Via, o.op.Key, o.op.Fence, fmtAt(o.end)))
			}
			out = append(out, Violation{
				Invariant: I7, Key: name, Ops: ids,
				Detail: fmt.Sprintf("%d holders of the semaphore %s of %d permits at %s: %s", len(open), name, s.permits, fmtAt(l.start), strings.Join(who, "; ")),
			})
		}
	}
	return out
}

// checkI8 finds grants that returned inside an earlier grant's lock-delay:
// after its lease ended, before its delay record can have ended.
func checkI8(h History, p CheckParams) []Violation {
	releases := map[int]time.Duration{}
	extends := map[int][]*Op{}
	grants := map[string][]*Op{}
	for i := range h.Ops {
		switch op := &h.Ops[i]; {
		case op.Kind == "release":
			if r, ok := releases[op.Grant]; !ok || op.Invoke < r {
				releases[op.Grant] = op.Invoke
			}
		case op.Kind == "extend" && op.OK:
			extends[op.Grant] = append(extends[op.Grant], op)
		case op.Kind == "acquire" && op.OK && !op.Probe:
			grants[op.Key] = append(grants[op.Key], op)
		}
	}
	ends := map[int]time.Duration{} // lease ends, as I1 sees them
	for _, ls := range leases(h) {
		for _, l := range ls {
			ends[l.op.ID] = l.end
		}
	}
	earliest := func(from, ttl, delay time.Duration) time.Duration {
		return from + time.Duration(float64(ttl+delay)*(1-p.DriftFactor))
	}
	var out []Violation
	for _, key := range sortedKeys(grants) {
		for _, g := range grants[key] {
			if g.LockDelay <= 0 {
				continue
			}
			leaseEnd, ok := ends[g.ID]
			if !ok {
				leaseEnd = g.Return
			}
			recordEnd := earliest(g.Invoke, g.TTL, g.LockDelay)
			for _, e := range extends[g.ID] {
				recordEnd = max(recordEnd, earliest(e.Invoke, e.TTL, g.LockDelay))
			}
			delayEnd, released := recordEnd, "no release sent"
			if r, ok := releases[g.ID]; ok {
				delayEnd = min(delayEnd, r)
				released = "its release sent at " + fmtAt(r)
			}
			for _, o := range grants[key] {
				if o == g || o.Invoke < g.Return || o.Return < leaseEnd || o.Return >= delayEnd {
					continue
				}
				out = append(out, Violation{
					Invariant: I8, Key: key, Ops: []int{g.ID, o.ID},
					Detail: fmt.Sprintf("client %d (%s, fence %d) was granted %s at %s, inside the lock-delay of %v of client %d's lock (fence %d, lease over at %s; its delay record cannot end before %s; %s)",
						o.Client, o.Via, o.Fence, key, fmtAt(o.Return), g.LockDelay, g.Client, g.Fence, fmtAt(leaseEnd), fmtAt(recordEnd), released),
				})
			}
		}
	}
	return out
}

// checkI9 finds status calls that answered "free" while a grant's lease
// of their key covered the whole call, from before it was invoked until
// after it returned.
func checkI9(h History, _ CheckParams) []Violation {
	var out []Violation
	ls := leases(h)
	for i := range h.Ops {
		op := &h.Ops[i]
		if op.Kind != "status" || !op.OK || op.Held {
			continue
		}
		for _, l := range ls[op.Key] {
			if l.start <= op.Invoke && op.Return <= l.end {
				out = append(out, Violation{
					Invariant: I9, Key: op.Key, Ops: []int{l.op.ID, op.ID},
					Detail: fmt.Sprintf("status of %s by client %d (%s) answered free over %s–%s, inside client %d's lease (%s, fence %d) from %s to %s",
						op.Key, op.Client, op.Via, fmtAt(op.Invoke), fmtAt(op.Return), l.op.Client, l.op.Via, l.op.Fence, fmtAt(l.start), fmtAt(l.end)),
				})
			}
		}
	}
	return out
}
