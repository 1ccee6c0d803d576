package redlock

import (
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Masters that refuse writes: a Redis with maxmemory and the noeviction
// policy (the policy lock keys need: every lock key has a TTL, so the
// volatile-* policies would evict them) answers every write with "OOM
// command not allowed when used memory > 'maxmemory'" once its memory is
// full — while it still answers PING and reads. Such a master cannot vote
// for an acquire or an extend; it is not down. It is seen two ways:
//
//   - a vote script answered with an OOM error (at once, by the vote);
//   - a health probe's INFO memory: used memory (less what Redis does not
//     count against maxmemory) above maxmemory under noeviction.
//
// The master shows as MasterOOM with the reason until a probe finds its
// memory below the limit and no vote was refused for it since
// (oomVoteHold).

// ErrMasterOOM: the master answered, but refused the write: its used
// memory is above maxmemory under maxmemory-policy noeviction. Matched by
// the *MasterError of such a vote.
var ErrMasterOOM = fmt.Errorf("master refuses writes: used memory above maxmemory (OOM)")

// oomVoteHold is how long an OOM answer to a vote keeps the master shown
// as refusing writes, whatever the probes say since: a probe's reading can
// dip below the limit between two refused writes.
func (c *Client) oomVoteHold() time.Duration { return max(2*c.opts.healthInterval, time.Second) }

// isOOM reports whether err is Redis's OOM error reply.
func isOOM(err error) bool { return err != nil && redis.HasErrorPrefix(err, "OOM") }

// voteOOM records that a vote on m was refused for OOM and returns the
// error that replaces the reply's.
func (m *master) voteOOM(err error) error {
	m.st.oomVoteAt.Store(time.Now().UnixNano())
	m.st.oomRefusals.Add(1)
	return &MasterError{Index: m.idx, Addr: m.addr, Err: fmt.Errorf("%w: %v", ErrMasterOOM, err)}
}

// voteWrote records that an acquire vote on m was answered without an
// error: its SET ran, so the master accepts writes again.
func (m *master) voteWrote() {
	if m.st.oomVoteAt.Load() != 0 {
		m.st.oomVoteAt.Store(0)
	}
}

// observeMemory reads INFO memory's fields from a probe: whether the
// master is over maxmemory under noeviction, and why.
func (m *master) observeMemory(info map[string]string) {
	used, err1 := strconv.ParseInt(info["used_memory"], 10, 64)
	limit, err2 := strconv.ParseInt(info["maxmemory"], 10, 64)
	if err1 != nil || err2 != nil {
		return
	}
	notCounted, _ := strconv.ParseInt(info["mem_not_counted_for_evict"], 10, 64)
	over := limit > 0 && info["maxmemory_policy"] == "noeviction" && used-notCounted > limit
	reason := ""
	if over {
		reason = fmt.Sprintf("refuses writes (OOM): used memory %d bytes is above maxmemory %d bytes with maxmemory-policy noeviction; free memory or raise maxmemory", used-notCounted, limit)
	}
	m.st.mu.Lock()
	m.st.oomProbe, m.st.oomReason = over, reason
	m.st.mu.Unlock()
}

// refusingWrites reports whether m refuses writes now, and why. Called
// with m.st.mu held.
func (m *master) refusingWritesLocked(now time.Time) (bool, string) {
	if m.st.oomProbe {
		return true, m.st.oomReason
	}
	if at := m.st.oomVoteAt.Load(); at != 0 && now.Sub(time.Unix(0, at)) < m.c.oomVoteHold() {
		return true, "refuses writes (OOM): a vote was answered \"OOM command not allowed when used memory > 'maxmemory'\"; free memory or raise maxmemory"
	}
	return false, ""
}
