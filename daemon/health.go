package daemon

import (
	"encoding/json"
	"math"
	"net/http"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// readyBody is GET /readyz:
//
//	{"ready":true,"status":"ready","waiting":0,"longest_max_ttl_s":86400,
//	 "clock_bounds":{"drift_factor":0.01,"validity_drift_factor":0.01,"clock_allowance_ms":71},
//	 "quorum":{"needed":3,"counting":4,"writable":4,"up":5,"masters":5,"available":true},
//	 "masters":[{"index":0,"addr":"127.0.0.1:6379","state":"up","drifting":false,
//	             "counts":true,"quarantine_reason":"","quarantine_left_s":0,
//	             "clock_offset_ms":0.412,"drift_ratio":0.000013,"warnings":[],
//	             "run_id":"5b6c4f1e","uptime_s":3600,"durable":false,
//	             "refusing_writes":false,"write_refusal":"",
//	             "latency_ms":0.213,"last_error":"","checked_at_ms":1735689600123}, …]}
//
// status is "ready", "no_quorum" or "shutting_down"; ready is true only for
// "ready" (HTTP 200; otherwise 503, with the same body).
//
// quorum: needed is N/2+1 of ALL configured masters; counting is how many
// masters' votes count right now (up, not quarantined, not awaiting a
// fencing repair); writable is how many of those accept writes (not
// refusing them for OOM); up is how many answer at all; available is
// writable >= needed, and /readyz is 503 when it is false.
//
// Per master:
//   - state is "up", "down", "quarantined" (it receives writes but its votes
//     do not count, for quarantine_left_s more seconds, because of
//     quarantine_reason: a restart without its data, a clock jump, drift) or
//     "repairing" (it lost its data; its votes count again once its fencing
//     counter is repaired from a quorum, or by `redlockd repair-fences` when
//     a majority lost its data, and then after the quarantine the repair
//     sets; quarantine_left_s of a repairing master is what remains of its
//     provisional quarantine, the longest max TTL from the loss, and 0 once
//     that has passed: it still waits for the repair) or "oom" (it answers and its votes count,
//     but it refuses writes: used memory above maxmemory under
//     noeviction; refusing_writes and write_refusal say so) or "waiting" (no master that answers has a
//     marker yet and some have not answered: a brand-new deployment, or one
//     whose silent masters kept the only markers). A down master may be quarantined
//     too: quarantine_reason and quarantine_left_s say so whatever the state.
//   - drifting: its clock rate differs from ours by more than the drift
//     factor (it is quarantined for that as well).
//   - counts: its votes count towards the quorum now.
//   - clock_offset_ms: its wall clock minus ours at the last probe;
//     drift_ratio: how fast that offset changes (0.01 = 10 ms per second).
//   - warnings: configuration problems (evicting maxmemory-policy, a
//     replica, cluster mode, the same server as another address); always an
//     array.
//   - run_id: the first 8 characters of the server's run_id, "" before the
//     first probe; uptime_s its uptime; durable: appendonly with appendfsync
//     always (a restart keeps its keys and is not quarantined).
//   - latency_ms is the round trip of its last health probe; checked_at_ms
//     (Unix milliseconds) is absent before the first probe; last_error is
//     the last probe or connection error, kept after the master recovers.
type readyBody struct {
	Ready  bool        `json:"ready"`
	Status string      `json:"status"`
	Quorum readyQuorum `json:"quorum"`
	// Waiting is how many acquires with wait_ms wait in this daemon; with
	// no quorum they keep waiting within their wait_ms.
	Waiting int `json:"waiting"`
	// LongestMaxTTLS is the longest max TTL the daemon knows of on its
	// masters, in seconds: its max_ttl, or a longer one another client
	// registered (redlock.Client.LongestMaxTTL). It bounds how long a
	// master that lost its data stays out. Absent when the MasterHealth does
	// not tell.
	LongestMaxTTLS int64 `json:"longest_max_ttl_s,omitempty"`
	// ClockBounds are the clock bounds the daemon uses, its own tightened
	// by other clients of its masters (redlock.Client.ClockBounds). Absent
	// when the MasterHealth does not tell.
	ClockBounds *readyClockBounds `json:"clock_bounds,omitempty"`
	Masters     []readyMaster     `json:"masters"`
	// Groups is each master group's quorum and masters, with master_groups
	// only (see readyGroup); absent with one group of masters.
	Groups []readyGroup `json:"groups,omitempty"`
	// Placement is the placement phase, with master_groups only (see
	// readyPlacement).
	Placement *readyPlacement `json:"placement,omitempty"`
	// Gate is the layout gate's state for a daemon under it (see
	// readyGate); absent otherwise. It does not change ready.
	Gate *readyGate `json:"gate,omitempty"`
	// Idempotency is the records' own quorum (absent when the
	// idempotency actions are off): a master repaired after a data loss
	// counts for locks once repaired, for records only when the max
	// retention has passed since (redlock/idempotency/safety.go). It does
	// not change ready: locks work without it.
	Idempotency *readyIdem `json:"idempotency,omitempty"`
}

// readyGate is /readyz's gate, for a daemon under the layout gate
// (daemon/placements.go): granting is whether it grants and extends now
// (a permit from the placement registry); refusal says why not (the 503's
// message), "" while granting or before it is decided (a permit ran out
// and the next round has not answered yet). A gate that refuses leaves
// /readyz ready: the masters may be fine, and a rolling update must not
// stall on it; acquires answer 503 meanwhile. A black-box pass found the
// 503s' "see /readyz" pointing at a body that did not say why.
type readyGate struct {
	Granting bool   `json:"granting"`
	Refusal  string `json:"refusal,omitempty"`
}

// readyIdem is /readyz's idempotency: needed and counting as in quorum,
// counting the masters whose answers count for records now; available is
// counting >= needed.
type readyIdem struct {
	Needed    int               `json:"needed"`
	Counting  int               `json:"counting"`
	Available bool              `json:"available"`
	Masters   []readyIdemMaster `json:"masters"`
}

// readyIdemMaster is one master's standing for records: counts (its
// votes count for locks and it is not waiting out the max retention since
// a repair, known from its answers to record actions or from the marker
// the lock path reads at every probe); seen is false before its first
// answer to a record action; repaired_at_ms (Unix ms, absent when never
// repaired) and counts_again_in_s say when a repaired master answers for
// records again.
type readyIdemMaster struct {
	Index          int   `json:"index"`
	Counts         bool  `json:"counts"`
	Seen           bool  `json:"seen"`
	RepairedAtMS   int64 `json:"repaired_at_ms,omitempty"`
	CountsAgainInS int64 `json:"counts_again_in_s"`
}

// readyGroup is one master group in /readyz, with master_groups:
//
//	{"name":"g1","quorum":{"needed":3,"counting":5,…,"available":true},
//	 "ops":{"acquire":120,"release":118,"extend":4,"status":0},
//	 "masters":[…as above…]}
//
// Each group has its own quorum; a key's lock needs its own group's. The
// top-level quorum then adds the groups' counts up and is available only
// when every group's is; the top-level masters list every group's masters,
// each with its group. status is "ready" when every group has a quorum,
// "partial" (still 200: keys of the groups with a quorum are served) when
// some have, "no_quorum" (503) when none has. ops counts the calls this
// daemon sent to the group since it started, per operation.
type readyGroup struct {
	Name    string           `json:"name"`
	Quorum  readyQuorum      `json:"quorum"`
	Ops     map[string]int64 `json:"ops"`
	Masters []readyMaster    `json:"masters"`
}

// readyClockBounds is /readyz's clock_bounds: drift_factor judges the
// masters' clocks (the smallest registered), validity_drift_factor and
// clock_allowance_ms are taken from every validity (the largest).
type readyClockBounds struct {
	DriftFactor         float64 `json:"drift_factor"`
	ValidityDriftFactor float64 `json:"validity_drift_factor"`
	ClockAllowanceMS    int64   `json:"clock_allowance_ms"`
}

type readyQuorum struct {
	Needed    int  `json:"needed"`
	Counting  int  `json:"counting"`
	Writable  int  `json:"writable"`
	Up        int  `json:"up"`
	Masters   int  `json:"masters"`
	Available bool `json:"available"`
}

type readyMaster struct {
	Index            int      `json:"index"`
	Addr             string   `json:"addr"`
	State            string   `json:"state"`
	Drifting         bool     `json:"drifting"`
	Counts           bool     `json:"counts"`
	QuarantineReason string   `json:"quarantine_reason"`
	QuarantineLeftS  int64    `json:"quarantine_left_s"`
	ClockOffsetMS    float64  `json:"clock_offset_ms"`
	DriftRatio       float64  `json:"drift_ratio"`
	Warnings         []string `json:"warnings"`
	RunID            string   `json:"run_id"`
	UptimeS          int64    `json:"uptime_s"`
	Durable          bool     `json:"durable"`
	RefusingWrites   bool     `json:"refusing_writes"`
	WriteRefusal     string   `json:"write_refusal"`
	LatencyMS        float64  `json:"latency_ms"`
	LastError        string   `json:"last_error"`
	CheckedAtMS      int64    `json:"checked_at_ms,omitempty"`
	// Group is the master's group, with master_groups only.
	Group string `json:"group,omitempty"`
}

// masterState is st.State, or up/down from st.Up for a MasterHealth that
// does not set it.
func masterState(st *redlock.MasterStatus) redlock.MasterState {
	switch {
	case st.State != "":
		return st.State
	case st.Up:
		return redlock.MasterUp
	}
	return redlock.MasterDown
}

// writable reports whether a master can vote for an acquire now: its
// votes count and it accepts writes (not OOM).
func writable(st *redlock.MasterStatus) bool { return st.Counting && !st.RefusingWrites }

// quarantineSeconds is d in whole seconds, rounded up, so that a
// quarantine still in force never shows as 0.
func quarantineSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// millis is d in milliseconds, rounded to the microsecond.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// finite is f, or 0 when f is NaN or infinite (which JSON cannot carry).
func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

func readyMasterOf(st *redlock.MasterStatus) readyMaster {
	rm := readyMaster{
		Index:          st.Index,
		Addr:           st.Addr,
		State:          string(masterState(st)),
		Drifting:       st.Drifting,
		Counts:         st.Counting,
		ClockOffsetMS:  millis(st.ClockOffset),
		DriftRatio:     finite(math.Round(st.DriftRatio*1e9) / 1e9),
		Warnings:       append([]string{}, st.Warnings...),
		RunID:          st.RunID[:min(8, len(st.RunID))],
		UptimeS:        int64(st.Uptime / time.Second),
		Durable:        st.Durable,
		RefusingWrites: st.RefusingWrites,
		WriteRefusal:   st.WriteRefusal,
		LatencyMS:      millis(st.Latency),
		LastError:      st.LastError,
	}
	// The reason stays while the master is repairing, after its
	// quarantine time ran out: it says what the operator must do.
	rm.QuarantineReason = st.QuarantineReason
	if st.QuarantineLeft > 0 {
		rm.QuarantineLeftS = quarantineSeconds(st.QuarantineLeft)
	}
	if !st.CheckedAt.IsZero() {
		rm.CheckedAtMS = st.CheckedAt.UnixMilli()
	}
	return rm
}

// serveHealthz answers 200 while the process runs, shutting down included.
func (s *Server) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, []byte(`{"status":"ok"}`+"\n"))
}

// serveReadyz answers 200 when a quorum of masters counts (up, not
// quarantined, not awaiting repair) and the server is not shutting down,
// else 503; the body lists every master either way. Readiness is decided
// from the same snapshot the body shows, so the two never disagree.
func (s *Server) serveReadyz(w http.ResponseWriter, _ *http.Request) {
	ms := s.health.Masters()
	body := readyBody{
		Status:         "ready",
		Quorum:         readyQuorum{Needed: s.health.Quorum(), Masters: len(ms)},
		Waiting:        s.waiters.waiting(),
		Masters:        make([]readyMaster, len(ms)),
		LongestMaxTTLS: quarantineSeconds(s.health.LongestMaxTTL()),
	}
	if b := s.health.ClockBounds(); b != (redlock.ClockBounds{}) {
		body.ClockBounds = &readyClockBounds{DriftFactor: b.DriftFactor, ValidityDriftFactor: b.ValidityDriftFactor,
			ClockAllowanceMS: (b.ClockAllowance + time.Millisecond - 1).Milliseconds()}
	}
	for i := range ms {
		st := &ms[i]
		body.Masters[i] = readyMasterOf(st)
		if st.Up {
			body.Quorum.Up++
		}
		if st.Counting {
			body.Quorum.Counting++
		}
		if writable(st) {
			body.Quorum.Writable++
		}
	}
	body.Quorum.Available = body.Quorum.Writable >= body.Quorum.Needed
	partial := false
	gh := s.health.Groups()
	if gh != nil {
		partial = readyGroups(&body, gh)
		body.Placement = placementOf(gh)
	}
	if g, ok := s.locker.(interface{ Gate() *PlacementGate }); ok {
		body.Gate = g.Gate().ready(time.Now())
	}
	if s.idem != nil {
		rm := s.idem.store.RecordMasters(time.Now())
		needed := body.Quorum.Needed
		if len(body.Groups) > 0 { // the records live behind the first group's Client
			needed = body.Groups[0].Quorum.Needed
		}
		ri := &readyIdem{Needed: needed, Masters: make([]readyIdemMaster, len(rm))}
		for i, m := range rm {
			lock := i < len(ms) && ms[i].Counting
			rim := readyIdemMaster{Index: m.Index, Seen: m.Seen, Counts: lock && m.Counts,
				CountsAgainInS: int64((m.Left + time.Second - 1) / time.Second)}
			if !m.RepairedAt.IsZero() {
				rim.RepairedAtMS = m.RepairedAt.UnixMilli()
			}
			if rim.Counts {
				ri.Counting++
			}
			ri.Masters[i] = rim
		}
		ri.Available = ri.Counting >= ri.Needed
		body.Idempotency = ri
	}
	status := http.StatusOK
	switch {
	case s.shuttingDown.Load():
		body.Status, status = "shutting_down", http.StatusServiceUnavailable
	case partial:
		body.Status = "partial"
	case !body.Quorum.Available:
		body.Status, status = "no_quorum", http.StatusServiceUnavailable
	}
	body.Ready = status == http.StatusOK
	writeJSONValue(w, status, &body)
}

// serveStats answers GET /v1/stats for the dashboard; see statsBody.
func (s *Server) serveStats(w http.ResponseWriter, _ *http.Request) {
	st := s.metrics.stats()
	writeJSONValue(w, http.StatusOK, &st)
}

func writeJSONValue(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // only plain structs, maps and strings: cannot happen
		writeError(w, http.StatusInternalServerError, codeInternal, "internal error")
		return
	}
	writeJSON(w, status, append(b, '\n'))
}

// readyGroups fills body from each group's own snapshot (readyGroup says
// how), and reports whether some groups have a quorum and some do not.
func readyGroups(body *readyBody, gh *GroupsHealth) (partial bool) {
	body.Quorum = readyQuorum{Available: true}
	body.Masters = body.Masters[:0]
	some := false
	for _, grp := range gh.Groups {
		q, ms := groupQuorum(grp.Health)
		rg := readyGroup{Name: grp.Name, Quorum: q, Masters: make([]readyMaster, len(ms)), Ops: grp.Ops.named()}
		for j := range ms {
			rg.Masters[j] = readyMasterOf(&ms[j])
			rm := rg.Masters[j]
			rm.Group = grp.Name
			body.Masters = append(body.Masters, rm)
		}
		body.Groups = append(body.Groups, rg)
		body.Quorum.Needed += q.Needed
		body.Quorum.Counting += q.Counting
		body.Quorum.Writable += q.Writable
		body.Quorum.Up += q.Up
		body.Quorum.Masters += q.Masters
		body.Quorum.Available = body.Quorum.Available && q.Available
		some = some || q.Available
	}
	return some && !body.Quorum.Available
}
