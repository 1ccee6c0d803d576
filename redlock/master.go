package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxQueue bounds the commands waiting for one lane; past it new commands
// fail at once instead of growing memory behind a stalled master.
const maxQueue = 1 << 16

// master is one independent Redis master: its connections (lanes) and what
// the health loop and the lanes learned about it.
type master struct {
	idx   int
	addr  string
	lanes []*lane
	// list is the lane of List's reads: they never queue in front of a
	// lock command in this process, and go out in small pipelines
	// (listBatch) so that a master interleaves lock commands between them.
	list *lane
	c    *Client

	// rdb holds the lanes' connections: no retries, long read timeout,
	// every dial error a failing connection (refusedAsConn).
	rdb    atomic.Pointer[redis.Client]
	connMu sync.Mutex // serializes Close with a use of rdb that must not follow it
	// probe is the health connection, used only under Client.probeMu.
	probe     *redis.Client
	probeOpts redis.Options
	// noConfigGet: the master's ACL refused CONFIG GET, so probes no
	// longer send it (its settings stay unchecked; see probeOnce).
	// maxTTLRefused: the master refused the max TTL registration
	// (maxttl.go); logged once until it accepts one again. maxTTLOdd:
	// its registry held entries no Client writes; logged once.
	maxTTLRefused atomic.Bool
	maxTTLOdd     atomic.Bool
	// clockBoundsRefused, clockBoundsOdd: the same for the clock bounds
	// registration (clockbounds.go).
	clockBoundsRefused atomic.Bool
	clockBoundsOdd     atomic.Bool
	noConfigGet        atomic.Bool
	// bareReading: the last new connection's onConnect sent the
	// one-command batch reading (INFO server stats) and it parsed (Redis
	// 7.0 or later): the batch reading is that command, not
	// stats_read.lua (batchstats.go).
	bareReading atomic.Bool
	// bareReadingPinned: a test chose the form (useReadingForm);
	// onConnect leaves bareReading alone. Connections dialled while a
	// test runs (a release still in flight on this master when the
	// quorum answered) would otherwise set the form back.
	bareReadingPinned atomic.Bool
	// refused: the last failed dial of a lane (refusedAsConn); nil once
	// a dial connects.
	refused atomic.Pointer[refusal]

	st masterState

	// unreleased: releases this master did not answer (releaseLater).
	unreleased unreleasedSet

	up        atomic.Bool
	latencyNS atomic.Int64 // last probe round trip
	checkedAt atomic.Int64 // unix nanos of the last probe
	lastErr   atomic.Pointer[string]
}

// reply is one master's answer to one call.
type reply struct {
	idx int
	val any
	err error // *MasterError for transport problems, or a Redis error
	// sent and at are when the pipeline carrying the call was written and
	// when its answers arrived (zero for failures): the script ran in
	// between, which bounds its clock reading (clock.go).
	sent, at time.Time
	// stats: for a vote, the INFO stats its lane read after the batch's
	// votes (batchstats.go); ok false when there is none.
	stats statsReading
	// gen is the master's repair generation when the pipeline was
	// written: a reading from an older one counts no loss (lostDataSeen).
	gen uint64
	// unsent: the lane answered the call without sending it, and never
	// will (master.fail on a call that need not be sent): the master
	// received nothing from it (unreached.go).
	unsent bool
}

// call is one script invocation bound for one master.
type call struct {
	script   *redis.Script
	keys     []string // shared by the calls of one fan-out; read-only
	args     []any    // shared by the calls of one fan-out; read-only
	evalSha  []any    // the EVALSHA line of script, keys and args (evalShaArgs); shared, read-only
	deadline int64    // unix nanos: not sent after this (start of the fan-out + per-master timeout)
	idx      int32    // the master's index
	mustSend bool     // releases are sent even late, to clean up after a slow SET
	// hearDown: sent to a master marked down too (acquire votes with the
	// granted-lock check, granted.go): only what the lane sees now (a
	// pipeline stuck past the per-master timeout, a dial failed within its
	// redial wait) answers it at once.
	hearDown bool
	// compact: a detached release.lua call whose keys are {key, token}
	// and args nil; exec builds its line again (Client.releaseLine).
	compact bool
	// (deadline in nanos and idx in 32 bits, next to mustSend: a call is
	// 128 bytes, not 160 — the size every release queued behind a paused
	// master keeps, see detached.)
	// fence: a fence write-back of this fence; the lane records its
	// acknowledgement (counterAtLeast) as it delivers the answer, before
	// the answers after it in the batch, whoever reads it and when.
	fence int64
	out   *fan // its fan-out, which takes the answer (fan.put); nil = nobody waits
	cmd   *redis.Cmd
	// written is when the lane wrote the call's pipeline (unix nanos; 0
	// until then). gather waits for a written call until written + the
	// per-master timeout: the timeout measures the master's answer, not
	// the time the call spent queued in this process (see gather).
	written atomic.Int64
}

// detached is a copy of c with what sending it takes and no caller. c is
// an element of its fan-out's calls: queued itself, it would keep them all
// alive — the other masters' calls and their answered commands, about
// 2 KB — for as long as it waits. The copy's EVALSHA line is built again
// when it is sent (exec): the fan-out's line boxes every key and argument,
// about 160 bytes that would wait with it.
//
// A single-key release keeps only its key and token: its KEYS (the lock
// key, the fence record's and delay record's names, built for the
// release) and ARGV (the token boxed, the channel, the release id) were
// about 370 bytes more per queued release, and a master paused for a few
// seconds under load has tens of thousands of them queued (the bench's
// paused HTTP cells: most of the daemon's heap). exec builds them again
// with Client.releaseLine, which releaseCall built them with.
func (c *call) detached() *call {
	d := &call{script: c.script, keys: c.keys, args: c.args, mustSend: c.mustSend, deadline: c.deadline, idx: c.idx, fence: c.fence}
	if c.script == releaseScript {
		if token, ok := c.args[0].(string); ok {
			d.keys, d.args, d.compact = []string{c.keys[0], token}, nil, true
		}
	}
	return d
}

// fail answers c with err without sending it. A call that must be sent
// (a release) may still be queued after its answer (lane.submit); any
// other is dropped: its answer says unsent.
// errSameServerCall is the answer of a call not sent to a master that is
// the same server as an earlier one (condSameServer).
var errSameServerCall = fmt.Errorf("%w: the same server as an earlier master (same run_id): not sent", ErrMasterQuarantined)

func (m *master) fail(c *call, err error) {
	if c.out != nil {
		c.out.put(reply{idx: int(c.idx), err: &MasterError{Index: m.idx, Addr: m.addr, Err: err}, unsent: !c.mustSend})
		c.out = nil
	}
}

func (m *master) setDown(err error) {
	msg := err.Error()
	m.lastErr.Store(&msg)
	if m.up.Swap(false) {
		m.c.opts.logger.Warn("master down", masterAttr(m), slog.Any("error", err))
	}
}

func (m *master) setUp() {
	if !m.up.Swap(true) {
		m.lastErr.Store(nil) // the error described the outage that just ended
		m.c.opts.logger.Info("master up", masterAttr(m))
	}
}

// renewProbe replaces the health connection after a failed dial: go-redis
// would otherwise answer the next probes' dials with that failure for up
// to a second without dialing (its dial circuit breaker). The lanes' pool
// never opens it (refusedAsConn). Called under Client.probeMu.
func (m *master) renewProbe() {
	_ = m.probe.Close()
	o := m.probeOpts
	m.probe = redis.NewClient(&o)
}

// lane is one pipelined connection to a master. A single goroutine drains
// the queue into one pipeline at a time and reads every answer before it
// sends the next pipeline, so a command queued after another for the same
// key (a release after its SET) reaches the master after it. Callers never
// wait on a lane: the lane puts each answer in its caller's fan-out, and
// the caller waits on that fan-out with its own per-master timeout
// (fan, gather).
type lane struct {
	m         *master
	batch     int // the most calls in one pipeline
	mu        sync.Mutex
	queue     []*call
	spare     []*call
	wake      chan struct{}
	busySince atomic.Int64 // unix nanos when the in-flight pipeline was sent; 0 when idle
}

func newLane(m *master, batch int) *lane {
	return &lane{m: m, batch: batch, wake: make(chan struct{}, 1)}
}

// submit queues c, or answers it at once when the master cannot answer in
// time: known down (a call that must hear a master marked down, hearDown,
// only when a lane's dial failed within its redial wait), or stuck on an
// earlier pipeline for longer than the per-master timeout. A release that is answered at once is still queued so
// that it follows any SET already sent.
func (l *lane) submit(c *call, now time.Time) {
	m := l.m
	if m.st.conds.has(condSameServer) {
		// The same server as an earlier master, which every call reaches
		// through that master's address: sent here too, a call would run
		// twice on one server (an acquire refused by its own SET, an
		// extend counted twice). Not sent, even with mustSend.
		if c.out != nil {
			c.out.put(reply{idx: int(c.idx), err: &MasterError{Index: m.idx, Addr: m.addr, Err: errSameServerCall}, unsent: true})
			c.out = nil
		}
		return
	}
	switch {
	case !m.up.Load() && (!c.hearDown || m.recentRefusal(now) != nil):
		m.fail(c, ErrMasterDown)
	default:
		if bs := l.busySince.Load(); bs != 0 && now.UnixNano()-bs > int64(m.c.opts.perMasterTimeout) {
			m.fail(c, ErrMasterBusy)
		}
	}
	if c.out == nil {
		if !c.mustSend {
			return
		}
		// A release answered at once still goes out, as a detached copy:
		// c itself would keep its whole fan-out alive while it waits,
		// behind a paused master one per release (bench: the daemon's
		// RSS in the paused cells).
		c = c.detached()
	}
	l.mu.Lock()
	if len(l.queue) >= maxQueue {
		l.mu.Unlock()
		m.fail(c, errors.New("queue full"))
		return
	}
	l.queue = append(l.queue, c)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *lane) run(closed <-chan struct{}) {
	for {
		select {
		case <-l.wake:
		case <-closed:
			l.mu.Lock()
			q := l.queue
			l.queue = nil
			l.mu.Unlock()
			for _, c := range q {
				l.m.fail(c, ErrClosed)
			}
			return
		}
		for {
			// spare is touched only by this goroutine; swapping it in keeps
			// two backing arrays alive instead of allocating per batch.
			l.mu.Lock()
			batch := l.queue
			l.queue = l.spare[:0]
			l.mu.Unlock()
			if len(batch) == 0 {
				l.spare = batch
				break
			}
			for start := 0; start < len(batch); start += l.batch {
				l.exec(batch[start:min(start+l.batch, len(batch))])
			}
			clear(batch)
			if cap(batch) > 4*l.batch {
				batch = nil // do not keep a backlog's worth of memory
			}
			l.spare = batch[:0]
		}
	}
}

// exec sends one pipeline and delivers every answer. Calls whose caller has
// already given up are not sent at all (an acquire that is never sent can
// leave no key behind), except releases.
func (l *lane) exec(batch []*call) {
	m := l.m
	now := time.Now()
	send := batch[:0]
	for _, c := range batch {
		if !c.mustSend && now.UnixNano() > c.deadline {
			m.fail(c, ErrMasterTimeout)
			continue
		}
		send = append(send, c)
	}
	if len(send) == 0 {
		return
	}
	ctx := context.Background()
	if r := m.recentRefusal(now); r != nil {
		// A lane's dial failed within its redial wait: the batch gets
		// that failure without a dial or a connection (refusedAsConn).
		for _, c := range send {
			c.cmd = redis.NewCmd(ctx)
			c.cmd.SetErr(r.err)
		}
		if m.c.opts.observer != nil {
			m.c.opts.observer.ObserveBatch(m.idx, len(send), 0, r.err)
		}
		m.deliver(send, statsReading{}, now, now, 0)
		return
	}
	l.busySince.Store(now.UnixNano())
	gen := m.st.inc.repairGen.Load()
	pipe := m.rdb.Load().Pipeline()
	votes := false
	for _, c := range send {
		if c.compact {
			c.keys, c.args = m.c.releaseLine(c.keys[0], c.keys[1])
			c.compact = false
		}
		if c.evalSha == nil {
			c.evalSha = evalShaArgs(c.script, c.keys, c.args)
		}
		c.cmd = redis.NewCmd(ctx, c.evalSha...)
		c.cmd.SetFirstKeyPos(3)
		_ = pipe.Process(ctx, c.cmd)
		c.written.Store(now.UnixNano())
		votes = votes || l.m.c.sc.isVote(c.script)
	}
	// One reading of the INFO statistics after the batch's votes, which
	// judges them all (batchstats.go). Without the data loss guard no
	// vote is judged on it.
	var reading *redis.Cmd
	if votes && m.c.opts.dataLossGuard {
		reading = queueStatsReading(ctx, pipe, false, m.bareReading.Load())
	}
	_, err := pipe.Exec(ctx)
	if err != nil && !isConnError(err) {
		err = l.retryNoScript(ctx, send, &reading)
	}
	stats := parseStatsReading(reading)
	l.busySince.Store(0)
	received := time.Now()
	if m.c.opts.observer != nil {
		m.c.opts.observer.ObserveBatch(m.idx, len(send), time.Since(now), connErr(err))
	}
	if err != nil && isDialError(err) {
		if noServer(err) {
			// Only a refused dial: a dial that timed out may measure
			// this machine, not the master (probeFailuresForDown).
			m.setDown(err)
		}
	}
	m.deliver(send, stats, now, received, gen)
}

// deliver hands every call of a batch its answer: the Redis or transport
// error (a refused write for OOM noted, voteOOM), or the reply with when
// the pipeline was written and answered, the repair generation it was
// sent in and, for a vote, the batch's statistics reading.
func (m *master) deliver(send []*call, stats statsReading, now, received time.Time, gen uint64) {
	for _, c := range send {
		if c.out == nil {
			continue
		}
		if cerr := c.cmd.Err(); cerr != nil {
			switch {
			case isConnError(cerr):
				cerr = &MasterError{Index: m.idx, Addr: m.addr, Err: cerr}
			case isOOM(cerr):
				cerr = m.voteOOM(cerr)
			}
			c.out.put(reply{idx: int(c.idx), err: cerr})
		} else {
			if c.fence > 0 {
				m.fenceAcknowledged(c.fence, c.cmd.Val(), gen)
			}
			if c.script == m.c.sc.acquire {
				// Its SET ran (whatever it answered): writes are accepted.
				// Releases and status reads succeed under OOM too, so they
				// say nothing.
				m.voteWrote()
			}
			r := reply{idx: int(c.idx), val: c.cmd.Val(), sent: now, at: received, gen: gen}
			if m.c.sc.isVote(c.script) {
				r.stats = stats
			}
			c.out.put(r)
		}
		c.out = nil
	}
}

// fenceAcknowledged records a fence write-back's acknowledgement of fence
// (counterAtLeast) unless it was sent before m's last repair (gen) or ran
// before it: the repair's counter is the new baseline, and a fence it
// replaced says nothing about it (as for a vote, checkVote).
func (m *master) fenceAcknowledged(fence int64, val any, gen uint64) {
	code, at := parseFenceReply(val)
	if code != 1 || gen != m.st.inc.repairGen.Load() || at.UnixMilli() < m.st.inc.repairedAt.Load() {
		return
	}
	m.counterAtLeast(fence, at)
}

// retryNoScript re-sends, in their original order, the calls whose EVALSHA
// failed with NOSCRIPT (the script cache was emptied), as EVAL. Scripts are
// loaded on every new connection, so this only happens after a SCRIPT FLUSH.
// When a vote is re-sent, or the batch's statistics reading met NOSCRIPT
// itself, a new reading follows the retried calls and replaces *reading:
// the first one ran before them, or failed (batchstats.go).
func (l *lane) retryNoScript(ctx context.Context, send []*call, reading **redis.Cmd) error {
	var again []*call
	votes := false
	for _, c := range send {
		if isNoScript(c.cmd.Err()) {
			again = append(again, c)
			votes = votes || l.m.c.sc.isVote(c.script)
		}
	}
	readAgain := *reading != nil && (votes || isNoScript((*reading).Err()))
	if len(again) == 0 && !readAgain {
		return nil
	}
	pipe := l.m.rdb.Load().Pipeline()
	for _, c := range again {
		c.cmd = c.script.Eval(ctx, pipe, c.keys, c.args...)
	}
	if readAgain {
		*reading = queueStatsReading(ctx, pipe, true, l.m.bareReading.Load())
	}
	_, err := pipe.Exec(ctx)
	if err != nil && !isConnError(err) {
		return nil
	}
	return err
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// isConnError tells transport failures (the answer is unknown) from Redis
// error replies (the master answered).
func isConnError(err error) bool {
	if err == nil {
		return false
	}
	var rerr redis.Error
	return !errors.As(err, &rerr)
}

func connErr(err error) error {
	if isConnError(err) {
		return err
	}
	return nil
}

// refusedAsConn wraps the lanes' dialer of m (go-redis's for o when
// nil): a dial that fails (refused, timed out, no such host, unreachable)
// is handed to the pool as a connection whose every read and write fails
// with the dial's error. go-redis's pool otherwise counts failed dials and,
// after PoolSize of them, answers every later dial with the last error for
// up to a second without dialing (its dial circuit breaker): a master back
// in that second — restarted with its data, reachable again after a
// partition — would go unheard by the acquire votes sent to it (granted.go,
// "Masters marked down"). The failing connection fails the batch with the
// dial's error (isDialError, noServer), and the pool drops it. The next
// dial comes no sooner than the failure's redial wait (refusal.wait): a
// batch within it fails with the same error in lane.exec, and a vote to a
// master marked down in submit, without a dial or a connection.
func refusedAsConn(m *master, dial func(ctx context.Context, network, addr string) (net.Conn, error), o *redis.Options) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		dial = redis.NewDialer(o)
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if r := m.recentRefusal(time.Now()); r != nil {
			return refusedConn{err: r.err}, nil
		}
		cn, err := dial(ctx, network, addr)
		if err != nil {
			// Wrapped: go-redis reports a *net.OpError from a write
			// as its inner error, which would hide the dial.
			r := &refusal{at: time.Now(), err: refusedDial{err}, wait: otherRedial}
			if errors.Is(err, syscall.ECONNREFUSED) {
				r.wait = refusedRedial
			}
			m.refused.Store(r)
			return refusedConn{err: r.err}, nil
		}
		m.refused.Store(nil)
		return newAbandonableConn(cn), nil
	}
}

// abandonableConn is a lane connection that, once a read or write on it
// has timed out (the stall timeout: go-redis then drops it from the pool
// and closes it), is closed with a reset (SO_LINGER 0) instead of the
// usual close. A plain close leaves what the master's kernel has not
// acknowledged in ours, and our kernel keeps sending it after the socket
// is gone: a vote written into a partition reached the master when the
// partition healed, seconds after its acquire had failed and its clean-up
// release had gone over a new connection, and set a lock key nobody held
// for a whole TTL (the Docker drill partition-2's I4; an extend's restore
// the same). A reset drops it. What the master's kernel has already
// acknowledged (a paused master's unread input) is not recalled; that
// master runs it when it runs again, and the kept release follows
// (unreached.go). A connection closed without a timeout (Close, an idle
// connection) is closed as usual, so a release written just before
// still goes out. TestAbandonedConnectionIsReset.
type abandonableConn struct {
	net.Conn
	timedOut atomic.Bool
}

// abandonableSysConn is an abandonableConn over a connection with a file
// descriptor (plain TCP): it passes SyscallConn on, because go-redis's
// check of a pooled connection before reuse (did the master close it:
// killed, restarted) reads the outer connection only, and skips one that
// is not a syscall.Conn — a lane would then send its next batch into a
// dead master's connection and fail it with EOF. A TLS connection is not
// one, with or without the wrapper (go-redis does not peek under TLS).
type abandonableSysConn struct {
	*abandonableConn
	sc syscall.Conn
}

func (c abandonableSysConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

func newAbandonableConn(cn net.Conn) net.Conn {
	ac := &abandonableConn{Conn: cn}
	if sc, ok := cn.(syscall.Conn); ok {
		return abandonableSysConn{abandonableConn: ac, sc: sc}
	}
	return ac
}

func (c *abandonableConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && isTimeout(err) {
		c.timedOut.Store(true)
	}
	return n, err
}

func (c *abandonableConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil && isTimeout(err) {
		c.timedOut.Store(true)
	}
	return n, err
}

// NetConn is the connection wrapped, for go-redis's idle-connection check
// (it unwraps through NetConn, as for a *tls.Conn).
func (c *abandonableConn) NetConn() net.Conn { return c.Conn }

func (c *abandonableConn) Close() error {
	if c.timedOut.Load() {
		if tc, ok := tcpConnOf(c.Conn); ok {
			_ = tc.SetLinger(0)
		}
	}
	return c.Conn.Close()
}

// tcpConnOf is the TCP connection under cn (under TLS too).
func tcpConnOf(cn net.Conn) (*net.TCPConn, bool) {
	for range 4 {
		if tc, ok := cn.(*net.TCPConn); ok {
			return tc, true
		}
		u, ok := cn.(interface{ NetConn() net.Conn })
		if !ok {
			return nil, false
		}
		cn = u.NetConn()
	}
	return nil, false
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// refusedRedial: a master that refused a lane's dial (ECONNREFUSED: its
// host answers, no process listens) is dialled again after this long at
// the earliest; otherRedial after any other dial failure (timed out, no
// such host, unreachable), each of which may mean a name lookup or a
// timeout per try. A master back within that time counts as failing for
// an acquire in it (granted.go). Without a wait, with a master's process
// gone, every batch to it would pay a dial and a connection's buffers
// (BenchmarkOneMasterKilled; docs/performance-history.md).
const (
	refusedRedial = time.Millisecond
	otherRedial   = 100 * time.Millisecond
)

// refusal is a failed dial of a lane, when it failed, and how long until
// the next dial (refusedRedial, otherRedial).
type refusal struct {
	at   time.Time
	err  error
	wait time.Duration
}

// recentRefusal is the last failed dial of m's lanes when it failed less
// than its redial wait before now; nil otherwise.
func (m *master) recentRefusal(now time.Time) *refusal {
	if r := m.refused.Load(); r != nil && now.Sub(r.at) < r.wait {
		return r
	}
	return nil
}

// refusedConn is a refused dial as a net.Conn (refusedAsConn).
type refusedConn struct{ err error }

// refusedDial is the error of a refusedConn: the dial's own error.
type refusedDial struct{ err error }

func (e refusedDial) Error() string { return e.err.Error() }
func (e refusedDial) Unwrap() error { return e.err }

func (c refusedConn) Read([]byte) (int, error)         { return 0, c.err }
func (c refusedConn) Write([]byte) (int, error)        { return 0, c.err }
func (c refusedConn) Close() error                     { return nil }
func (c refusedConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c refusedConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c refusedConn) SetDeadline(time.Time) error      { return nil }
func (c refusedConn) SetReadDeadline(time.Time) error  { return nil }
func (c refusedConn) SetWriteDeadline(time.Time) error { return nil }

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
