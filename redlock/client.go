package redlock

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"
)

// Client runs the Redlock algorithm over N independent Redis masters.
// It is safe for concurrent use. Create it with New and Close it when done.
type Client struct {
	masters []*master
	quorum  int
	need    int // votes a grant and an extend need: quorum + WithExtraVotes
	opts    options
	sc      *scripts // the Lua scripts with checks (scripts.go)
	seed    maphash.Seed
	// releaseChan is the release channel (wait.go releaseChannel), boxed
	// once: every release's arguments carry it, and a release queued
	// behind a paused master keeps them.
	releaseChan any

	epoch     time.Time                          // monotonic origin of quarantine deadlines
	epochWall int64                              // epoch's wall clock, unix ns: our clock is epochWall + monotonic time since epoch
	losses    [len(DataLossReasons)]atomic.Int64 // per DataLossReasons
	kick      chan struct{}
	probeMu   sync.Mutex // one probe round at a time
	repairs   atomic.Int64
	// mastersMaxTTL: the longest max TTL (ns) another client registered on
	// the masters (maxttl.go); maxTTLWarned: that was logged.
	mastersMaxTTL atomic.Int64
	maxTTLWarned  atomic.Bool
	// own: this Client's clock bounds from its options; bounds: those
	// tightened by other clients' registrations (clockbounds.go);
	// boundsWarned: that was logged.
	own          clockBounds
	bounds       atomic.Pointer[clockBounds]
	boundsWarned atomic.Bool
	// fenceIssued: the highest fence this Client issued (fence.go,
	// issuedFloor); fenceBelowWarned: counters below it were logged.
	fenceIssued      atomic.Int64
	fenceBelowWarned atomic.Bool
	// fenceExhaustedLogged: a grant was refused for want of a fence up to
	// MaxFence, and that was logged (acquire.go, nextFence).
	fenceExhaustedLogged atomic.Bool
	quarantines          atomic.Int64

	// unreached: granted single-key locks whose votes never reached some
	// masters (unreached.go).
	unreached unreachedSet

	waits    waitQueues
	attempts atomic.Int64 // acquire attempts (fan-outs), for tests
	// grantRefusals: acquires refused over a granted lock (granted.go).
	grantRefusals atomic.Int64
	// contendedRetries: attempts a one-shot acquire made again after a
	// contended one (retryContended); beforeContendedRetry, for tests,
	// runs before each such retry's delay (set before the Client is used).
	contendedRetries     atomic.Int64
	beforeContendedRetry func()
	// fenceRewrites: grants whose early fence write-back was below a
	// counter a later answer showed, written again (acquire.go writeBack).
	fenceRewrites atomic.Int64
	// restoredCopies: lock copies Extend set again (restoreCopies).
	restoredCopies atomic.Int64
	// fenceFloor is a fencing counter value every counting master is
	// raised to by the health loop (spreadFence): another master group's
	// highest, while the groups change (Moving.SyncFences).
	fenceFloor atomic.Int64
	subOnce    sync.Once
	subs       []*redis.PubSub // release-channel subscriptions, one per master
	// subConns: per master, the connection its subscription dialled last
	// (subDialer), under subMu; Close closes them before the PubSubs.
	subMu    sync.Mutex
	subConns []net.Conn

	closeOnce sync.Once
	closed    chan struct{}
	wg        sync.WaitGroup
	// closing: Close has begun; no acquire attempt starts after it.
	// acquiring: acquire attempts under way (acquireSet), which Close
	// waits for before it closes the lanes (beginAcquire).
	closing   atomic.Bool
	acquiring atomic.Int64

	// slotsReads shares one semaphore slots read among the attempts that
	// need it at once (grantedSlots); slotsReadsMade counts the reads
	// sent, for tests.
	slotsReads     singleflight.Group
	slotsReadsMade atomic.Int64
}

// New returns a Client over the given masters: independent Redis servers,
// not replicas of each other. len(masters) must be odd and at least 3; the
// quorum is len(masters)/2+1 of ALL configured masters, never of the
// healthy ones. New runs one health probe round (bounded by the health
// timeout) before it returns, so that no master votes before its run_id
// and marker were checked; masters that do not answer are not an error.
//
// The Client owns the connections it makes from the given options: it sets
// MaxRetries to -1 (a silent retry on a new connection could reorder a
// release before its SET), its own timeouts and pool size, and an OnConnect
// hook that loads the Lua scripts.
func New(masters []*redis.Options, opts ...Option) (*Client, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	o.horizonKey = o.markerKey + ":horizon"
	o.maxTTLKey = o.markerKey + ":max_ttl"
	o.clockBoundsKey = o.markerKey + ":clock_bounds"
	if err := o.checkKeysApart(); err != nil {
		return nil, err
	}
	n := len(masters)
	if n < 3 || n%2 == 0 {
		return nil, fmt.Errorf("%w: masters: %d given, need an odd number ≥ 3", ErrInvalid, n)
	}
	if err := checkLockDelayOption(&o); err != nil {
		return nil, err
	}
	if o.extraVotes < 0 || o.extraVotes > n-(n/2+1) {
		return nil, fmt.Errorf("%w: extra votes: %d given, at most %d with %d masters (quorum %d + extra votes ≤ masters)", ErrInvalid, o.extraVotes, n-(n/2+1), n, n/2+1)
	}
	c := &Client{
		quorum: n/2 + 1,
		need:   n/2 + 1 + o.extraVotes,
		opts:   o,
		sc:     controlScripts(&o),
		seed:   maphash.MakeSeed(),
		epoch:  time.Now(),
		kick:   make(chan struct{}, 1),
		closed: make(chan struct{}),
	}
	c.epochWall = c.epoch.UnixNano()
	c.releaseChan = releaseChannelOf(o.markerKey)
	c.own = o.ownBounds()
	c.bounds.Store(&c.own)
	for i, mo := range masters {
		if mo == nil || mo.Addr == "" {
			return nil, fmt.Errorf("%w: masters[%d]: missing address", ErrInvalid, i)
		}
		c.masters = append(c.masters, c.newMaster(i, mo))
	}
	for _, m := range c.masters {
		for _, l := range m.lanes {
			c.wg.Go(func() { l.run(c.closed) })
		}
		c.wg.Go(func() { m.list.run(c.closed) })
	}
	// One probe round before returning: a master must not vote before we
	// know its run_id and whether it lost its data while unwatched (the
	// marker rule). Bounded by the health timeout.
	c.probeAll()
	c.afterProbes()
	c.warmLanes()
	c.wg.Go(c.healthLoop)
	return c, nil
}

// newMaster returns master i, reached with mo: its lanes' connection pool
// (the Client's own settings: no silent retry, the stall timeout, scripts
// loaded on connect) and its health probe's own connection.
func (c *Client) newMaster(i int, mo *redis.Options) *master {
	o := &c.opts
	m := &master{idx: i, addr: mo.Addr, c: c}
	m.st.inc.evicted.Store(-1)
	m.st.clock = clockGuard{perMasterTimeout: o.perMasterTimeout}
	lo := *mo
	lo.MaxRetries = -1
	lo.DialTimeout = max(o.perMasterTimeout, 100*time.Millisecond)
	lo.DialerRetries = 1 // a refused dial is an answer: the master is down
	lo.ReadTimeout = o.stallTimeout
	lo.WriteTimeout = o.stallTimeout
	lo.ContextTimeoutEnabled = false
	lo.PoolSize = o.lanes + 3 // + the listing lane
	// No connections opened in the background (MinIdleConns): while the
	// master refuses connections they would be failing ones
	// (refusedAsConn), kept idle and handed to the first batch after it
	// is back. warmLanes opens a lane connection before New returns.
	lo.MinIdleConns = 0
	lo.PipelinePoolSize = -1
	lo.DisableIdentity = true
	// RESP2: the lanes read script replies, INFO and PING, the same in
	// both protocols (no script returns a boolean, the one type whose
	// conversion differs), and under RESP3 go-redis checks for push
	// notifications before every reply it reads — about 3 % of the
	// client's CPU per cycle (docs/performance.md). Nothing is pushed on
	// a lane: the waiters subscribe on connections of their own (wait.go).
	lo.Protocol = 2
	lo.OnConnect = m.onConnect
	lo.Dialer = refusedAsConn(m, lo.Dialer, &lo)
	m.rdb.Store(redis.NewClient(&lo))

	po := *mo
	po.MaxRetries = -1
	po.DialTimeout = o.healthTimeout
	po.DialerRetries = 1
	po.ReadTimeout = o.healthTimeout
	po.WriteTimeout = o.healthTimeout
	po.PoolSize = 1
	po.PipelinePoolSize = -1
	po.DisableIdentity = true
	po.OnConnect = nil
	m.probeOpts = po
	m.probe = redis.NewClient(&po)

	m.up.Store(true) // optimistic until the first probe or dial says otherwise
	for range o.lanes {
		m.lanes = append(m.lanes, newLane(m, o.maxBatch))
	}
	m.list = newLane(m, listBatch)
	return m
}

// warmLanes opens the lanes' connections (dial, script load, run_id check in
// onConnect) before New returns, bounded by the health timeout, so that
// the first acquire does not pay for them within its per-master timeout.
// go-redis opens MinIdleConns in the background, which a first request
// right after startup can overtake.
func (c *Client) warmLanes() {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.healthTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, m := range c.masters {
		if !m.up.Load() {
			continue
		}
		wg.Go(func() { _ = m.rdb.Load().Ping(ctx).Err() })
	}
	wg.Wait()
}

// checkKeysApart refuses a fence key that names the marker or a key
// derived from it (the lease horizon, the registries), or whose fence
// records ("<fence key>:<lock key>") could: the counter or a record would
// overwrite the marker, and the data-loss checks read it (a marker key
// equal to the fence key was accepted, and every acquire then rewrote the
// marker with the counter).
func (o *options) checkKeysApart() error {
	if o.fenceKey == "" {
		return nil
	}
	for _, k := range []string{o.markerKey, o.horizonKey, o.maxTTLKey, o.clockBoundsKey} {
		if k == o.fenceKey || strings.HasPrefix(k, o.fenceKey+":") {
			return fmt.Errorf("%w: fence key %q: the marker key %q and its keys (%q…) must be neither it nor begin with %q", ErrInvalid, o.fenceKey, o.markerKey, o.markerKey+":", o.fenceKey+":")
		}
	}
	return nil
}

func (o *options) validate() error {
	switch {
	case o.perMasterTimeout <= 0:
		return fmt.Errorf("%w: per-master timeout must be > 0, got %v", ErrInvalid, o.perMasterTimeout)
	case !(o.driftFactor >= 0 && o.driftFactor <= MaxDriftFactor):
		return fmt.Errorf("%w: drift factor must be in [0, %v], got %v", ErrInvalid, MaxDriftFactor, o.driftFactor)
	case o.retry == nil || o.token == nil:
		return fmt.Errorf("%w: retry strategy and token generator must not be nil", ErrInvalid)
	case o.healthInterval <= 0 || o.healthTimeout <= 0:
		return fmt.Errorf("%w: health interval and timeout must be > 0", ErrInvalid)
	case o.stallTimeout < o.perMasterTimeout:
		return fmt.Errorf("%w: stall timeout %v is below the per-master timeout %v", ErrInvalid, o.stallTimeout, o.perMasterTimeout)
	case o.lanes < 1 || o.lanes > 64:
		return fmt.Errorf("%w: lanes must be 1..64, got %d", ErrInvalid, o.lanes)
	case o.maxBatch < 1:
		return fmt.Errorf("%w: max batch must be ≥ 1, got %d", ErrInvalid, o.maxBatch)
	case o.logger == nil:
		return fmt.Errorf("%w: logger must not be nil", ErrInvalid)
	case o.maxTTL < MinTTL:
		return fmt.Errorf("%w: max TTL %v is below the minimum %v", ErrInvalid, o.maxTTL, MinTTL)
	case o.maxTTL > MaxTTLCeiling:
		return fmt.Errorf("%w: max TTL %v is above the ceiling %v", ErrInvalid, o.maxTTL, MaxTTLCeiling)
	case o.markerKey == "":
		return fmt.Errorf("%w: marker key must not be empty", ErrInvalid)
	}
	return nil
}

// Close stops the health loop and the lanes (queued commands fail with
// ErrClosed) and closes every connection. It does not release held locks.
// First it stops new acquire attempts (they fail with ErrClosed, and
// ErrNotObtained) and waits, at most four per-master timeouts, for the
// attempts under way to end — granted, or refused with the keys they set
// released (Acquire, step 5) — so that an acquire failed by Close leaves no
// key behind; then, at most the per-master timeout, for releases already
// on their way (flushReleases). It also waits for a health round already
// under way to end (each of its steps bounded by the health timeout); a
// waiter's subscription to a paused master is cut, not waited for
// (subDialer).
func (c *Client) Close() error {
	var errs []error
	c.closeOnce.Do(func() {
		c.closing.Store(true)
		c.awaitAcquires()
		c.flushReleases()
		close(c.closed)
		// Closing the connections first unblocks a lane stuck on a paused
		// master, so Close does not wait for the stall timeout.
		for _, m := range c.masters {
			m.connMu.Lock()
			errs = append(errs, m.rdb.Load().Close())
			m.connMu.Unlock()
		}
		c.subOnce.Do(func() {}) // no subscription starts after Close
		// A PubSub holds its lock while it connects (dial, HELLO), and
		// PubSub.Close waits for it: to a paused master, whose kernel
		// accepts the connection, HELLO waits out go-redis's read timeout
		// (5 s). Closing the connection from under it ends that at once;
		// subDialer dials no other one after close(c.closed).
		c.subMu.Lock()
		for _, cn := range c.subConns {
			if cn != nil {
				_ = cn.Close()
			}
		}
		c.subMu.Unlock()
		for _, ps := range c.subs {
			errs = append(errs, ps.Close())
		}
		c.wg.Wait()
		for _, m := range c.masters {
			errs = append(errs, m.probe.Close())
		}
	})
	return errors.Join(errs...)
}

// closedErr is ErrClosed once Close has been called (nothing is sent
// then), nil before.
func (c *Client) closedErr() error {
	select {
	case <-c.closed:
		return ErrClosed
	default:
		return nil
	}
}

// Quorum returns the number of masters that must agree: N/2+1.
func (c *Client) Quorum() int { return c.quorum }

// VotesNeeded returns how many masters must vote for an acquire or an
// extend to succeed: the quorum plus WithExtraVotes.
func (c *Client) VotesNeeded() int { return c.need }

// GrantRefusals returns how many acquires had a quorum of votes and were
// refused because another master showed a granted lock on the key
// (granted.go): each means a master that voted had lost a lock (a
// rollback, an eviction), or a release had not reached every master — yet
// (under contention, an acquire racing the holder's release counts here
// too: its votes met the deletes on some masters and the lock still on
// others), or at all.
func (c *Client) GrantRefusals() int64 { return c.grantRefusals.Load() }

// ContendedRetries returns how many attempts one-shot acquires made again
// because an attempt was refused as contended (OutcomeError.Contended):
// callers that split the votes, none granted.
func (c *Client) ContendedRetries() int64 { return c.contendedRetries.Load() }

// FenceRewrites returns how many grants wrote their fence back a second
// time: a master that answered after the votes needed were in showed a
// fencing counter at or above the fence their counters gave (fence.go,
// "Counters of every master heard"). Each cost one more round trip.
func (c *Client) FenceRewrites() int64 { return c.fenceRewrites.Load() }

// drift returns the clock drift allowance for ttl: ttl × factor + 2ms (the
// Redis Redlock page, "Safety arguments"), plus clockAllowance, the largest
// forward jump of a master's clock the clock checks may miss (clock.go).
// The factor is the largest any client of the masters registered
// (clockbounds.go).
func (c *Client) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*c.budgetDrift()) + 2*time.Millisecond + c.clockAllowance()
}

// voteKeys returns the KEYS of the vote scripts and of the fence write-back
// for the lock key: {key, marker, lease horizon[, fencing counter, fence
// record]} (vote_prelude.lua, fence.lua).
func (c *Client) voteKeys(key string) []string {
	marker := c.opts.markerKey
	if c.opts.fenceKey == "" {
		return []string{key, marker, c.opts.horizonKey}
	}
	if c.opts.maxLockDelay > 0 {
		return []string{key, marker, c.opts.horizonKey, c.opts.fenceKey, c.fenceRecordKey(key), c.delayRecordKey(key)}
	}
	return []string{key, marker, c.opts.horizonKey, c.opts.fenceKey, c.fenceRecordKey(key)}
}

// releaseKeys returns the KEYS of the release script: {key[, fence record]}.
func (c *Client) releaseKeys(key string) []string {
	if c.opts.fenceKey == "" {
		return []string{key}
	}
	if c.opts.maxLockDelay > 0 {
		return []string{key, c.fenceRecordKey(key), c.delayRecordKey(key)}
	}
	return []string{key, c.fenceRecordKey(key)}
}

// releaseLine is the KEYS and ARGV of release.lua for key and token: the
// only ones a lane sends it with (releaseCall; call.detached keeps a
// queued copy as key and token and exec builds them again from here).
func (c *Client) releaseLine(key, token string) ([]string, []any) {
	return c.releaseKeys(key), []any{token, c.releaseChan, releaseID(token)}
}

// fenceRecordKey is the key of the lock key's fence record (fence.go):
// "<fence key>:<key>". Acquire refuses lock keys of that form.
func (c *Client) fenceRecordKey(key string) string {
	return c.opts.fenceKey + ":" + key
}

// reservedKey reports whether key is one of the Client's own keys: the
// marker, the lease horizon, the max TTL registry, the clock bounds
// registry, the fencing counter or a fence record.
func (c *Client) reservedKey(key string) bool {
	o := &c.opts
	return key == o.markerKey || key == o.horizonKey || key == o.maxTTLKey || key == o.clockBoundsKey ||
		o.fenceKey != "" && (key == o.fenceKey || strings.HasPrefix(key, o.fenceKey+":"))
}

func (c *Client) laneOf(key string) int {
	return int(maphash.String(c.seed, key) % uint64(c.opts.lanes))
}

// fan is one fan-out in flight: its calls (indexed by master), whose
// written stamps gather reads, and the answers, one per master it was
// sent to, each put exactly once by that master's lane (or by submit,
// when it fails a call at once).
//
// The gatherer does not sleep on the answers themselves: it sleeps on wake
// until as many answers have arrived as can change what it does next
// (gather's more). Woken once per master answer, a caller was woken
// thirteen times per fenced acquire+release cycle, by five lanes in turn;
// waking at the answers that can decide makes it four, and cut the
// library's CPU per cycle at c=64 by about 8 % (docs/performance.md).
type fan struct {
	calls []slot // calls[i]: master i's call, and its answer once put
	// arrived counts the answers put; put signals wake once it reaches
	// wakeAt (0: at every answer), which the gatherer sets with arm.
	arrived atomic.Int32
	wakeAt  atomic.Int32
	wake    chan struct{} // capacity 1: a signal may be stale, never lost
}

// slot is one master's call of a fan-out and its answer, readable by
// the gatherer once answered is set (fan.put). The answer is not in the
// call: a release queued behind a paused master is a copy of its call
// (call.detached), and every byte of it waits there, once per release.
type slot struct {
	call
	answer   reply
	answered atomic.Bool
}

func makeFan(n int) *fan {
	return &fan{calls: make([]slot, n), wake: make(chan struct{}, 1)}
}

// put stores r as master r.idx's answer and wakes the gatherer if the
// answers it waits for are in. Each master puts at most one answer per
// fan-out (call.out is cleared after it), so an answer is never
// overwritten.
func (f *fan) put(r reply) {
	c := &f.calls[r.idx]
	c.answer = r
	c.answered.Store(true)
	if f.arrived.Add(1) >= f.wakeAt.Load() {
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
}

// arm asks put to signal wake once want answers have arrived, and
// reports whether they already have: then the caller must not sleep on
// wake, whose signal may have gone out before the store. put adds to
// arrived, then reads wakeAt; arm stores wakeAt, then reads arrived. With
// sequentially consistent atomics one of the two sees the other, so an
// answer that reaches want is never missed by both.
func (f *fan) arm(want int32) (arrived bool) {
	f.wakeAt.Store(want)
	return f.arrived.Load() >= want
}

// answer returns master i's answer, if it has arrived.
func (f *fan) answer(i int) (reply, bool) {
	c := &f.calls[i]
	if !c.answered.Load() {
		return reply{}, false
	}
	return c.answer, true
}

// script is one script call, bound for the masters by fanout.
type script struct {
	s    *redis.Script
	keys []string // keys[0] picks the lane: every call for one key keeps its order
	args []any
	// mustSend: sent even after the per-master timeout (a release, which
	// cleans up after a slow SET; see call.mustSend).
	mustSend bool
	// hearDown: sent to masters marked down too (call.hearDown).
	hearDown bool
	// only marks the masters it is sent to; nil: all of them.
	only []bool
	// mayDrop: bit i set, the call to master i is not sent with mustSend
	// even when the others are (a release to a master the lock's votes
	// never reached, unreached.go).
	mayDrop uint64
	// via picks the lane on each master; nil: the lane of keys[0].
	via func(*master) *lane
	// fence: a fence write-back of this fence (fence.lua), whose
	// acknowledgement the lane records as it delivers it (see call.fence).
	fence int64
}

// fanout sends one script call to every master (or, when s.only is not
// nil, to the masters it marks) and returns the fan-out, and how many
// masters will answer. Every call for the same key goes through the same
// lane of its master, which keeps their order. A call not written to its
// master within the per-master timeout since start is not sent (except
// with mustSend): it fails with ErrMasterTimeout.
func (c *Client) fanout(s script, start time.Time) (*fan, int) {
	via := s.via
	if via == nil {
		i := c.laneOf(s.keys[0])
		via = func(m *master) *lane { return m.lanes[i] }
	}
	f := makeFan(len(c.masters))
	deadline := start.Add(c.opts.perMasterTimeout).UnixNano()
	closed := false
	select {
	case <-c.closed:
		closed = true
	default:
	}
	sent := 0
	evalSha := evalShaArgs(s.s, s.keys, s.args)
	for i, m := range c.masters {
		if s.only != nil && !s.only[i] {
			continue
		}
		sent++
		cl := &f.calls[i].call
		cl.script, cl.keys, cl.args, cl.evalSha, cl.mustSend, cl.deadline, cl.idx, cl.out = s.s, s.keys, s.args, evalSha, s.mustSend && s.mayDrop&masterBit(i) == 0, deadline, int32(i), f
		cl.fence, cl.hearDown = s.fence, s.hearDown
		if closed {
			m.fail(cl, ErrClosed)
			continue
		}
		via(m).submit(cl, start)
	}
	return f, sent
}

// evalShaArgs is the EVALSHA command line of script with keys and args,
// built once for every master of a fan-out: go-redis's Script.EvalSha
// would build (and box every key and argument into) a line per master.
func evalShaArgs(script *redis.Script, keys []string, args []any) []any {
	line := make([]any, 0, 3+len(keys)+len(args))
	line = append(line, "evalsha", script.Hash(), len(keys))
	for _, k := range keys {
		line = append(line, k)
	}
	return append(line, args...)
}

// gather reads the answers of a fan-out sent to the masters marked in only
// (nil: all) until onReply reports true, every master answered, the
// per-master timeout passed for every master still silent, or ctx ended.
// Masters that did not answer are reported to onReply as ErrMasterTimeout
// (or the context's error) so that the caller sees exactly one result per
// master.
//
// The per-master timeout counts from when the call was written to the
// master's connection (call.written), not from start: on a saturated
// machine a call can wait in this process — for its lane's previous
// pipeline, for a CPU — and that wait says nothing about the master. A
// call still unwritten at start + timeout is given up (the lane will not
// send it either), so a stuck or paused master still costs at most twice
// the timeout, and a busy one or one whose dial just failed nothing
// (lane.submit; an acquire's vote still goes to a master marked down,
// granted.go). Answers
// already received when a deadline passes, or when ctx ends, are read
// before anything is given up. Waiting longer never weakens a lock: every
// caller computes validity from start to the moment it decides (Redlock
// step 3), and a vote's clock reading is judged by its own round trip
// (clock.go).
//
// more, when not nil, says how many more answers onReply needs before it
// can decide, or do anything else that cannot wait (the early fence
// write-back): gather sleeps until that many have arrived (fan). It must
// never return more than that; a smaller number only wakes gather sooner,
// and nil wakes it at every answer.
func (c *Client) gather(ctx context.Context, f *fan, start time.Time, only []bool, onReply func(reply) (decided bool), more func() int) {
	answered := make([]bool, len(c.masters))
	left := 0
	for i := range answered {
		if only == nil || only[i] {
			left++
		} else {
			answered[i] = true
		}
	}
	taken := 0 // answers read from f (not the missing ones reported at the end)
	// drain reads the answers that have arrived, in master order (any
	// order is one they could have arrived in), and reports whether
	// onReply decided. A deadline or a cancelled ctx is judged only after
	// them.
	drain := func() bool {
		for i := range answered {
			if answered[i] {
				continue
			}
			r, ok := f.answer(i)
			if !ok {
				continue
			}
			answered[i] = true
			left--
			taken++
			if onReply(r) {
				return true
			}
		}
		return false
	}
	timer := gatherTimers.Get().(*time.Timer)
	timer.Reset(time.Until(start.Add(c.opts.perMasterTimeout)))
	defer func() {
		// Since Go 1.23 a stopped timer's channel holds no stale value,
		// so the next Reset starts it afresh.
		timer.Stop()
		gatherTimers.Put(timer)
	}()
	var missing error
loop:
	for {
		if drain() {
			return
		}
		if left == 0 {
			break
		}
		// Sleep until the answers that can change what onReply does next
		// are in: more (nil: one) beyond those read.
		k := 1
		if more != nil {
			k = max(1, min(more(), left))
		}
		if f.arm(int32(taken + k)) {
			continue
		}
		select {
		case <-f.wake:
		case <-timer.C:
			if drain() {
				return
			}
			if left == 0 {
				break loop
			}
			next := c.writtenDeadline(f, answered)
			if wait := time.Until(next); wait > 0 {
				timer.Reset(wait)
				continue
			}
			missing = ErrMasterTimeout
			break loop
		case <-ctx.Done():
			if drain() {
				return
			}
			missing = ctx.Err()
			break loop
		}
	}
	for i, ok := range answered {
		if !ok {
			m := c.masters[i]
			if onReply(reply{idx: i, err: &MasterError{Index: i, Addr: m.addr, Err: missing}}) {
				return
			}
		}
	}
}

// gatherTimers keeps gather's timers: three gathers per acquire+release
// cycle each allocated one (three allocations with its channel).
var gatherTimers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// writtenDeadline is the latest written + per-master timeout among the
// calls of f that have not answered, or the zero time when none of them
// was written.
func (c *Client) writtenDeadline(f *fan, answered []bool) time.Time {
	var latest int64
	for i := range f.calls {
		if answered[i] {
			continue
		}
		if w := f.calls[i].written.Load(); w != 0 {
			latest = max(latest, w+int64(c.opts.perMasterTimeout))
		}
	}
	if latest == 0 {
		return time.Time{}
	}
	return time.Unix(0, latest)
}

// masterAttr names a master in log records.
func masterAttr(m *master) slog.Attr { return slog.String("master", m.addr) }

// beginAcquire counts an acquire attempt under way, unless Close has
// begun (false: the attempt must not start); each true ends with
// endAcquire. Close sets closing before it reads the count, and an
// attempt counts itself before it reads closing, so either Close waits
// for the attempt or the attempt sees Close (found by a black-box pass:
// an attempt whose clean-up release met the closed lanes left its key on
// a quorum for its whole TTL, with no token to release it).
func (c *Client) beginAcquire() bool {
	c.acquiring.Add(1)
	if c.closing.Load() {
		c.acquiring.Add(-1)
		return false
	}
	return true
}

func (c *Client) endAcquire() { c.acquiring.Add(-1) }

// awaitAcquires waits for the acquire attempts under way, at most four
// per-master timeouts: an attempt's votes, its fence write-back (and
// rewrite) and its clean-up release are each bounded by one.
func (c *Client) awaitAcquires() {
	deadline := time.Now().Add(4*c.opts.perMasterTimeout + 50*time.Millisecond)
	for c.acquiring.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// flushReleases waits, at most the per-master timeout, until no lane of a
// master that is up has a release queued or a pipeline in flight. A Release
// whose ctx ended, and a failed attempt's clean-up past the per-master
// timeout, return with deletes still on their way; closing the
// connections under it would leave the key there until its TTL (and the
// granted-lock check would refuse the key until then).
func (c *Client) flushReleases() {
	deadline := time.Now().Add(c.opts.perMasterTimeout)
	for c.releasesPending() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

func (c *Client) releasesPending() bool {
	for _, m := range c.masters {
		if !m.up.Load() {
			continue
		}
		for _, l := range m.lanes {
			if l.busySince.Load() != 0 {
				return true
			}
			l.mu.Lock()
			queued := slices.ContainsFunc(l.queue, func(c *call) bool { return c.mustSend })
			l.mu.Unlock()
			if queued {
				return true
			}
		}
	}
	return false
}
