package limits

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlockd/redlockd/internal/keyenc"
)

var (
	//go:embed scripts/count_sync.lua
	countSyncLua string
	//go:embed scripts/held_sync.lua
	heldSyncLua string

	countSyncScript = redis.NewScript(countSyncLua)
	heldSyncScript  = redis.NewScript(heldSyncLua)
)

// Store keeps the accounts' shared limit state on the masters: the
// call counters of quotas and rate limits, and the sets of held locks. Every
// daemon serving the same masters with the same key prefix shares it; see
// limits.go for how counts are read and why they are bounded. Create it
// with NewStore and Close it after the daemon has stopped.
//
// It has connections of its own to every master, so that its batches never
// queue behind lock votes. It is used only by the Limiter's sync loop,
// once per sync interval, never on a request's path.
type Store struct {
	clients []*redis.Client
	// group is each client's master group (0 to Groups()−1), in the
	// daemon's order of master_groups: the quota and rate counts live on
	// group 0's masters, an account's held locks on the masters of the
	// group each lock is placed in (a set per group, counted by the
	// lock keys there; the account's count is the sum).
	group   []int
	groups  int
	timeout time.Duration
}

// NewStore connects (lazily) to the masters, in the same order as the
// Locker's. timeout bounds each master's part of a sync round; a master
// that does not answer within it is skipped for that round. It must be
// positive; redlockd uses twice the per-master timeout, at least 50ms.
func NewStore(masters []*redis.Options, timeout time.Duration) (*Store, error) {
	return NewGroupStore([][]*redis.Options{masters}, timeout)
}

// NewGroupStore is NewStore over master groups, in the daemon's order of
// master_groups (the first keeps the quota and rate counts); see Store.
func NewGroupStore(groups [][]*redis.Options, timeout time.Duration) (*Store, error) {
	var masters []*redis.Options
	var group []int
	for g, ms := range groups {
		if len(ms) == 0 {
			return nil, fmt.Errorf("limits: NewStore: group %d has no masters", g)
		}
		masters = append(masters, ms...)
		for range ms {
			group = append(group, g)
		}
	}
	if len(masters) == 0 {
		return nil, errors.New("limits: NewStore: no masters")
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("limits: NewStore: timeout %v must be positive", timeout)
	}
	s := &Store{timeout: timeout, group: group, groups: len(groups)}
	for _, m := range masters {
		o := *m
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = timeout, timeout, timeout
		o.MaxRetries = -1
		o.PoolSize = 2
		o.ContextTimeoutEnabled = true
		s.clients = append(s.clients, redis.NewClient(&o))
	}
	return s, nil
}

// Close closes the connections.
func (s *Store) Close() error {
	var errs []error
	for _, c := range s.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Masters is the number of masters, of every group.
func (s *Store) Masters() int { return len(s.clients) }

// Groups is the number of master groups; GroupOf(i) is master i's.
func (s *Store) Groups() int       { return s.groups }
func (s *Store) GroupOf(i int) int { return s.group[i] }

// groupSize is the number of masters of group g.
func (s *Store) groupSize(g int) int {
	n := 0
	for _, x := range s.group {
		if x == g {
			n++
		}
	}
	return n
}

// countOp writes this daemon's count in one bucket and reads the bucket.
type countOp struct {
	key   string
	own   int64
	ttlMS int64
	// carried: other daemons' counts, max-assigned under their ids
	// (accountState.carried).
	carried []carriedCount
}

// carriedCount is one other daemon's count in a bucket.
type carriedCount struct {
	id string
	n  int64
}

// heldCall syncs one account's held-lock set on one master.
type heldCall struct {
	key      string
	lockKeys []string
	tokens   []string
}

// masterReply is one master's answer to a sync round; ok is false when it
// did not answer (down, slow, or an error), and the rest is then empty.
type masterReply struct {
	ok     bool
	counts []map[string]int64 // per countOp: daemon id → count
	held   []int64            // per heldCall: locks not ended
	// counted, per heldCall and per token sent: whether the token is in
	// the master's set after the call (its key held it there).
	counted [][]bool
	err     error
}

// sync runs one round on every master at once: counts (the same for every
// master of group 0; none for the other groups', whose replies then carry
// no counts) and held[i] (master i's calls), pipelined in one round trip
// per master. It returns when every master has answered or failed.
func (s *Store) sync(ctx context.Context, id string, counts []countOp, held [][]heldCall) []masterReply {
	replies := make([]masterReply, len(s.clients))
	var wg sync.WaitGroup
	for i, c := range s.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mctx, cancel := context.WithTimeout(ctx, s.timeout)
			defer cancel()
			cs := counts
			if s.group[i] != 0 {
				cs = nil
			}
			replies[i] = syncMaster(mctx, c, id, cs, held[i])
		}()
	}
	wg.Wait()
	return replies
}

func syncMaster(ctx context.Context, c *redis.Client, id string, counts []countOp, held []heldCall) masterReply {
	r, err := pipeSync(ctx, c, id, counts, held)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// A master restarted or flushed its scripts: load them and retry
		// once.
		if err = loadScripts(ctx, c); err == nil {
			r, err = pipeSync(ctx, c, id, counts, held)
		}
	}
	if err != nil {
		return masterReply{err: err}
	}
	return r
}

func loadScripts(ctx context.Context, c *redis.Client) error {
	if err := countSyncScript.Load(ctx, c).Err(); err != nil {
		return err
	}
	return heldSyncScript.Load(ctx, c).Err()
}

func pipeSync(ctx context.Context, c *redis.Client, id string, counts []countOp, held []heldCall) (masterReply, error) {
	pipe := c.Pipeline()
	countCmds := make([]*redis.Cmd, len(counts))
	for i, op := range counts {
		args := []any{id, op.own, op.ttlMS}
		for _, c := range op.carried {
			args = append(args, c.id, c.n)
		}
		countCmds[i] = countSyncScript.EvalSha(ctx, pipe, []string{op.key}, args...)
	}
	heldCmds := make([]*redis.Cmd, len(held))
	for i, h := range held {
		keys := make([]string, 0, 1+len(h.lockKeys))
		keys = append(keys, h.key)
		keys = append(keys, h.lockKeys...)
		args := make([]any, len(h.tokens))
		for j, t := range h.tokens {
			args[j] = t
		}
		heldCmds[i] = heldSyncScript.EvalSha(ctx, pipe, keys, args...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return masterReply{}, err
	}
	r := masterReply{ok: true, counts: make([]map[string]int64, len(counts)), held: make([]int64, len(held))}
	for i, cmd := range countCmds {
		vals, err := cmd.StringSlice()
		if err != nil {
			return masterReply{}, err
		}
		m := make(map[string]int64, len(vals)/2)
		for j := 0; j+1 < len(vals); j += 2 {
			n, err := strconv.ParseInt(vals[j+1], 10, 64)
			if err != nil {
				return masterReply{}, fmt.Errorf("count of %q in %s: %w", vals[j], counts[i].key, err)
			}
			m[vals[j]] = n
		}
		r.counts[i] = m
	}
	r.counted = make([][]bool, len(held))
	for i, cmd := range heldCmds {
		vals, err := cmd.Int64Slice()
		if err != nil || len(vals) != 1+len(held[i].tokens) {
			return masterReply{}, fmt.Errorf("held sync of %s: %d values for %d tokens: %v", held[i].key, len(vals), len(held[i].tokens), err)
		}
		r.held[i] = vals[0]
		r.counted[i] = make([]bool, len(vals)-1)
		for j, v := range vals[1:] {
			r.counted[i][j] = v == 1
		}
	}
	return r, nil
}

// Keys of the limit state, under the key prefix beside the lock keys
// (daemon/keys.go); none starts with "lock:", so none can equal a lock
// key. The account is length-prefixed as in lock keys (writePart), so
// accounts never share one.
//
//	<prefix>quota:<len>:<account>:<window ms>:<window start, Unix ms>   hash: daemon id → calls
//	<prefix>rate:<len>:<account>:<Unix second>                          hash: daemon id → calls
//	<prefix>held:<len>:<account>                                        sorted set: token → end (ms)
//
// The quota and rate hashes are on the first group's masters; a held set
// is on every group's masters, holding the locks placed in that group.
func quotaKey(prefix, account string, window time.Duration, start int64) string {
	return limitKey(prefix, "quota:", account) + ":" + strconv.FormatInt(window.Milliseconds(), 10) + ":" + strconv.FormatInt(start, 10)
}

func rateKey(prefix, account string, second int64) string {
	return limitKey(prefix, "rate:", account) + ":" + strconv.FormatInt(second, 10)
}

func heldKey(prefix, account string) string { return limitKey(prefix, "held:", account) }

func limitKey(prefix, space, account string) string {
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteString(space)
	keyenc.WritePart(&b, account)
	return b.String()
}
