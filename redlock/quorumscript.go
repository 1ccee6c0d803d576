package redlock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A QuorumScript lets a layer above the lock (the idempotency records of
// redlock/idempotency) keep data of its own on the masters with the same
// protection as a vote: the script runs after vote_prelude.lua, in the same
// atomic step as the prelude's reading of the deployment marker, lease
// horizon, fencing counter and clock, and each answer goes through the
// checks a vote goes through (checkVote: marker, evictions, counters,
// command count, clock) and Client's verdict on the master (counts). An
// answer from a master that lost its data, or that the Client does not
// count now, is reported with the reason and must not be counted.
//
// What this does NOT give: the lock's data-loss rule bounds the damage by
// the longest lock TTL (the quarantine), and data kept longer than that —
// records with a retention of days — may be gone from a master whose votes
// count again. MasterAnswer.KeptSince says from when the master is known
// to have kept everything written to it; the caller decides how old that
// must be (redlock/idempotency: at least the longest record retention).
type QuorumScript struct{ s *redis.Script }

// quorumScripts are the scripts NewQuorumScript made: their calls are
// judged as votes (isVote), so the lane reads INFO stats after them.
var quorumScripts struct {
	mu  sync.Mutex
	set atomic.Pointer[[]*redis.Script]
}

// NewQuorumScript returns the script src run after vote_prelude.lua. src
// sees the prelude's locals (intact, nowms, reply, raiseHorizon) and must
// answer with reply(code, value, extra), where value is an integer and
// extra a string, and with reply(-2, 0) without writing when not intact.
// Its KEYS are {key, marker, lease horizon, fencing counter, fence record
// of key} (the last two only with fencing on). Call it once per script,
// at package initialisation.
func NewQuorumScript(src string) *QuorumScript {
	s := redis.NewScript(votePreludeLua + src)
	quorumScripts.mu.Lock()
	defer quorumScripts.mu.Unlock()
	var next []*redis.Script
	if cur := quorumScripts.set.Load(); cur != nil {
		next = append(next, *cur...)
	}
	next = append(next, s)
	quorumScripts.set.Store(&next)
	return &QuorumScript{s: s}
}

func isQuorumScript(s *redis.Script) bool {
	if cur := quorumScripts.set.Load(); cur != nil {
		for _, q := range *cur {
			if q == s {
				return true
			}
		}
	}
	return false
}

// MasterAnswer is one master's answer to a QuorumScript.
type MasterAnswer struct {
	Index int // the master's position in the configuration
	// Code, Value and Extra are the script's reply(code, value, extra).
	Code, Value int64
	Extra       string
	// Err is nil when the answer counts. Otherwise: a transport or Redis
	// error (*MasterError, a Redis error reply), or why the master's answer
	// does not count, matching ErrMasterQuarantined (ErrMasterDataLost for
	// a master that lost its data, found by this very answer or before).
	Err error
	// KeptSince is zero when the master has kept its data since the
	// deployment's first marker was written on it; otherwise the time of
	// its last repair by its own clock: data written to it before then may
	// be gone.
	KeptSince time.Time
	// MasterTime is the master's TIME when the script ran (zero on error).
	MasterTime time.Time
}

// RunQuorumScript sends s with KEYS for key (see NewQuorumScript) and args
// to every master at once, each call bounded by the per-master timeout,
// and hands each master's answer to onAnswer as it arrives, until onAnswer
// reports true, every master answered, or the timeout or ctx ended (late
// masters are reported with ErrMasterTimeout or ctx's error). Calls for
// the same key go through the same lane of each master, so two runs for
// one key reach each master in the order they were made. onAnswer runs on
// the caller's goroutine. Errors: ErrInvalid for an empty key.
func (c *Client) RunQuorumScript(ctx context.Context, s *QuorumScript, key string, args []any, onAnswer func(MasterAnswer) (decided bool)) error {
	if key == "" || c.reservedKey(key) {
		return ErrInvalid
	}
	start := time.Now()
	f, _ := c.fanout(script{s: s.s, keys: c.voteKeys(key), args: args}, start)
	c.gather(ctx, f, start, nil, func(r reply) bool {
		return onAnswer(c.judgeAnswer(r))
	}, nil)
	return nil
}

// RunQuorumScriptListing is RunQuorumScript over each master's listing
// connection (as List's reads and RunQuorumScriptOn): for reads that an
// operator's listing makes of every master, which must queue behind each
// other, never in front of a lock command of this process. Calls for one
// key keep their order among listing calls only.
func (c *Client) RunQuorumScriptListing(ctx context.Context, s *QuorumScript, key string, args []any, onAnswer func(MasterAnswer) (decided bool)) error {
	if key == "" || c.reservedKey(key) {
		return ErrInvalid
	}
	start := time.Now()
	f, _ := c.fanout(script{s: s.s, keys: c.voteKeys(key), args: args, via: listLane}, start)
	c.gather(ctx, f, start, nil, func(r reply) bool {
		return onAnswer(c.judgeAnswer(r))
	}, nil)
	return nil
}

// judgeAnswer turns one reply to a QuorumScript into a MasterAnswer: the
// checks of a vote, then whether the master counts.
func (c *Client) judgeAnswer(r reply) MasterAnswer {
	a := MasterAnswer{Index: r.idx}
	v, parsed, err := c.judgeVote(r)
	if parsed {
		a.Code, a.Value, a.Extra, a.MasterTime = v.code, v.value, v.extra, v.time
	}
	if err != nil {
		a.Err = err
		return a
	}
	// A repair marker's time is when the master was repaired: the loss
	// came before it. Every other marker a master can carry while its
	// answers count (checkVote compared it with the expected one) was
	// written when the deployment began on it, never by a repair; and a
	// repair marker "kept" (RepairFences on a master it found intact)
	// ended no loss.
	if mk, ok := parseMarker(v.marker); ok {
		a.KeptSince = mk.keptSince()
	}
	return a
}

// RunQuorumScriptOn is RunQuorumScript on master idx alone (its position
// in the configuration, 0 to N−1): for reads that walk the masters one
// after another, as a listing does. It goes over the listing connection
// of the master (as List's reads do), never queueing in front of a lock
// command of this process. Errors: ErrInvalid for an empty key or an idx
// out of range.
func (c *Client) RunQuorumScriptOn(ctx context.Context, s *QuorumScript, idx int, key string, args []any) (MasterAnswer, error) {
	if key == "" || c.reservedKey(key) || idx < 0 || idx >= len(c.masters) {
		return MasterAnswer{}, ErrInvalid
	}
	only := make([]bool, len(c.masters))
	only[idx] = true
	start := time.Now()
	f, _ := c.fanout(script{s: s.s, keys: c.voteKeys(key), args: args, only: only, via: listLane}, start)
	var a MasterAnswer
	c.gather(ctx, f, start, only, func(r reply) bool {
		a = c.judgeAnswer(r)
		return true
	}, nil)
	return a, nil
}

// MasterCount returns N, the number of configured masters.
func (c *Client) MasterCount() int { return len(c.masters) }
