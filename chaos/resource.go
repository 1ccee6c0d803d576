package chaos

import (
	"slices"
	"sync"
	"time"
)

// Resource is the fenced storage that the critical sections of a drill
// write to, as Kleppmann describes it ("How to do distributed locking",
// 2016): it remembers, per key, the highest fencing token it has accepted,
// and rejects a write with a lower one. Every write attempt is recorded:
// (key, fence, client, grant, phase, start, end, accepted).
//
// A critical section writes twice: "begin" when it starts and "commit" when
// it ends. A write carrying the same fence as the last accepted one is
// accepted only from the same grant (the same critical section); another
// grant with an equal fence is a duplicate fencing token, rejected.
//
// It is safe for concurrent use.
type Resource struct {
	rec *Recorder

	mu     sync.Mutex
	top    map[string]top
	writes []Write
}

type top struct {
	fence int64
	grant int
}

// Write is one write attempt on the Resource.
type Write struct {
	Key    string        `json:"key"`
	Fence  int64         `json:"fence"`
	Client int           `json:"client"`
	Grant  int           `json:"grant"` // the acquire Op's ID
	Phase  string        `json:"phase"` // "begin" or "commit"
	At     time.Duration `json:"at_ns"`
	OK     bool          `json:"accepted"`
	// Reason for a rejection: "stale" (lower fence than accepted before)
	// or "duplicate" (same fence, another grant). A section whose "begin"
	// was rejected does not try to commit.
	Reason string `json:"reason,omitempty"`
}

// NewResource returns an empty resource timed by rec.
func NewResource(rec *Recorder) *Resource {
	return &Resource{rec: rec, top: map[string]top{}}
}

// Write attempts a write of phase by client under grant with fence, and
// reports whether it was accepted.
func (r *Resource) Write(key string, fence int64, client, grant int, phase string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := Write{Key: key, Fence: fence, Client: client, Grant: grant, Phase: phase, At: r.rec.Now()}
	cur, seen := r.top[key]
	switch {
	case !seen || fence > cur.fence:
		w.OK = true
	case fence == cur.fence && grant == cur.grant:
		w.OK = true
	case fence == cur.fence:
		w.Reason = "duplicate"
	default:
		w.Reason = "stale"
	}
	if w.OK {
		r.top[key] = top{fence: fence, grant: grant}
	}
	r.writes = append(r.writes, w)
	return w.OK
}

// Writes returns every write attempt so far, in order.
func (r *Resource) Writes() []Write {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.writes)
}
