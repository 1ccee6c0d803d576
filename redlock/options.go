package redlock

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/redlockd/redlockd/internal/guardswitch"
)

// DefaultMaxTTL is WithMaxTTL's default: 24h. The daemon's max_ttl, in
// seconds, defaults to it and may not exceed it.
const DefaultMaxTTL = 24 * time.Hour

// MaxTTLCeiling is the longest max TTL New accepts: a year. It also bounds
// what a Client believes of the max TTL registry (maxttl.go): an entry
// above it cannot be a Client's, and counts as the ceiling.
const MaxTTLCeiling = 365 * 24 * time.Hour

// Option configures a Client. Every With* documents its default.
type Option func(*options)

type options struct {
	perMasterTimeout time.Duration
	driftFactor      float64
	retry            func() RetryStrategy
	token            TokenGenerator
	// nonce makes the unique part of the marker and repair-marker values
	// (marker.go, horizon.go): RandomToken always (only tests replace it).
	// Never the TokenGenerator: a caller's tokens may be short (the values
	// take 16 characters of it) or predictable, and the marker rule must
	// not depend on them.
	nonce          func() (string, error)
	healthInterval time.Duration
	healthTimeout  time.Duration
	stallTimeout   time.Duration
	lanes          int
	maxBatch       int
	observer       Observer
	logger         *slog.Logger
	fenceKey       string
	markerKey      string
	maxTTL         time.Duration
	horizonKey     string // markerKey + ":horizon"
	maxTTLKey      string // markerKey + ":max_ttl" (scripts/max_ttl.lua)
	clockBoundsKey string // markerKey + ":clock_bounds" (scripts/clock_bounds.lua)
	quarantine     bool
	clockGuard     bool
	// Guards that exist on/off only so that tests and drills can show the
	// bug each prevents (negative controls); always on otherwise.
	dataLossGuard       bool // vote scripts and probes check the deployment state
	voteClockGuard      bool // votes carry the master's clock and are checked
	clockReference      bool // masters' clocks are compared with each other
	clockAllowance      bool // drift includes the clock checks' blind spot
	sharedClockBounds   bool // clock bounds are registered and shared (clockbounds.go)
	extendNeverShortens bool
	statusNeedsQuorum   bool          // status answers "unknown" without a quorum either way
	grantedLockCheck    bool          // no grant while another master shows a granted lock (granted.go)
	extraVotes          int           // votes beyond the quorum an acquire and an extend need
	maxLockDelay        time.Duration // lockdelay.go; 0: off

	// adoptRepair: a repair marker without a quarantine keeps what was
	// read from the master before (a guard, as those above)
	repairKeepsBaselines bool
	// fenceAboveEveryAnswer: an acquire's fence is above every counter
	// its answers carried, not only its yes votes' (fence.go)
	fenceAboveEveryAnswer bool
	// repairJudgesReads: a repair's reads of the other masters are judged
	// for a rollback as a probe's are (horizon.go readOthers)
	repairJudgesReads bool
	// noRestore: Extend does not set the lock again where it is gone
	// (restoreCopies), as before: guardswitch.ExtendRestores, for the
	// negative controls.
	noRestore bool
}

func defaultOptions() options {
	return options{
		perMasterTimeout: 50 * time.Millisecond,
		driftFactor:      0.01,
		retry:            func() RetryStrategy { return ExponentialBackoff(8*time.Millisecond, 256*time.Millisecond) },
		token:            RandomToken,
		nonce:            RandomToken,
		healthInterval:   time.Second,
		healthTimeout:    500 * time.Millisecond,
		stallTimeout:     10 * time.Second,
		lanes:            1,
		maxBatch:         256,
		logger:           slog.New(slog.DiscardHandler),
		fenceKey:         "redlock:fence",
		markerKey:        "redlock:marker",
		maxTTL:           DefaultMaxTTL,
		quarantine:       true,
		clockGuard:       true,

		dataLossGuard:       true,
		voteClockGuard:      true,
		clockReference:      true,
		clockAllowance:      true,
		sharedClockBounds:   true,
		extendNeverShortens: true,
		statusNeedsQuorum:   true,
		grantedLockCheck:    true,

		repairKeepsBaselines:  true,
		fenceAboveEveryAnswer: true,
		repairJudgesReads:     true,
	}
}

// WithPerMasterTimeout bounds how long one attempt waits for each master's
// answer (the Redis Redlock page: "small compared to the total lock
// auto-release time"). Default 50ms. Release, extend and status use it too.
// It counts from when the command is written to the master's connection;
// a command this process could not write within d of the attempt's start
// (its lane stuck behind a slow master) is given up then. A master that
// is paused costs an attempt at most 2d; one stuck on an earlier command,
// or whose dial failed within its redial wait, nothing (granted.go,
// "Masters marked down": an acquire still asks a master marked down).
func WithPerMasterTimeout(d time.Duration) Option {
	return func(o *options) { o.perMasterTimeout = d }
}

// WithDriftFactor sets the clock drift allowance: drift = ttl × f + 2ms is
// subtracted from every validity, and the clock checks tolerate a drift
// rate of f. 0 ≤ f ≤ MaxDriftFactor (0.1); New returns ErrInvalid
// otherwise. Default 0.01. The Client registers it on the masters (the
// marker key + ":clock_bounds"): its clock checks use the smallest factor
// any client of the masters registered, its validities the largest.
func WithDriftFactor(f float64) Option {
	return func(o *options) { o.driftFactor = f }
}

// WithRetryStrategy sets the default retry strategy for Acquire; newStrategy
// is called once per Acquire. Retries happen only within the caller's wait
// budget (WithWait). Default ExponentialBackoff(8ms, 256ms), jittered.
func WithRetryStrategy(newStrategy func() RetryStrategy) Option {
	return func(o *options) { o.retry = newStrategy }
}

// WithTokenGenerator replaces RandomToken (128-bit crypto/rand, 32 hex chars).
func WithTokenGenerator(g TokenGenerator) Option {
	return func(o *options) { o.token = g }
}

// WithHealthInterval sets how often every master is probed. Default 1s.
func WithHealthInterval(d time.Duration) Option {
	return func(o *options) { o.healthInterval = d }
}

// WithHealthTimeout bounds one health probe. Default 500ms.
func WithHealthTimeout(d time.Duration) Option {
	return func(o *options) { o.healthTimeout = d }
}

// WithStallTimeout bounds how long a master's connection may sit on an
// unanswered batch before it is abandoned and a new connection is made.
// Callers never wait this long (they give up after the per-master timeout);
// the connection waits so that a release queued behind a slow SET reaches
// the master after that SET. Default 10s.
func WithStallTimeout(d time.Duration) Option {
	return func(o *options) { o.stallTimeout = d }
}

// WithLanes sets how many pipelined connections (lanes) each master gets.
// Commands for one key always use the same lane, which keeps their order.
// A multi-key lock's commands use the lane of its first key as given: with
// more than one lane, an extend or release that lists its keys in another
// order, or names one of them alone, may take another lane and is then
// not ordered after them (a release may reach a master before a slow
// restore and leave that copy until its TTL). Default 1: one lane drains
// everything queued into one pipeline per round trip, and fewer, larger
// pipelines cost fewer syscalls (measured with
// BenchmarkAcquireRelease at c=64: 11.9k cycles/s with 1 lane, 8.9k with 2,
// 5.8k with 4; equal at c=1).
func WithLanes(n int) Option {
	return func(o *options) { o.lanes = n }
}

// WithMaxBatch caps how many queued commands one pipeline round trip
// carries. Default 256.
func WithMaxBatch(n int) Option {
	return func(o *options) { o.maxBatch = n }
}

// WithObserver receives per-master timings and health results, for metrics.
// Default none.
func WithObserver(obs Observer) Option {
	return func(o *options) { o.observer = obs }
}

// WithLogger sets the logger for master state changes (up, down,
// quarantined, repaired, misconfigured). Records name the master in the
// attribute "master" (host:port) and errors in "error". nil, and the
// default, discard every record. go-redis's own log (failed dials to a
// master that is down, printed to stderr) is process-wide and not the
// Client's: set it with redis.SetLogger (redlockd serve sends it to its
// log; a black-box pass took those lines for this logger's).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		o.logger = l
	}
}

// WithFenceKey sets the key of the fencing counter on every master (one
// global sequence for all locks of this Client; see fence.go for the proof).
// "" disables fencing: Lock.Fence returns 0 and acquire saves one round
// trip. Default "redlock:fence".
func WithFenceKey(key string) Option {
	return func(o *options) { o.fenceKey = key }
}

// WithMarkerKey sets the key the Client writes on every master to notice,
// at startup, a master that lost its data while no Client watched. Default
// "redlock:marker".
func WithMarkerKey(key string) Option {
	return func(o *options) { o.markerKey = key }
}

// WithMaxTTL caps the TTL Acquire and Extend accept, and is how long a
// master that lost its data (or whose clock jumped) is quarantined at most:
// the longest a lock it held could still be valid. Default DefaultMaxTTL
// (24h). Set it to the longest TTL your callers really use: a lower value
// shortens quarantines. The Client registers it on the masters (the
// marker key + ":max_ttl"), and quarantines use the longest max TTL any
// client of the masters registered, so a client with a shorter one is
// never the weak link.
func WithMaxTTL(d time.Duration) Option {
	return func(o *options) { o.maxTTL = d }
}

// WithExtraVotes makes an acquire and an extend need quorum + k votes
// instead of a quorum (default k = 0). Two grants of one key on quorum + k
// masters each share at least 2k + 1 of N (odd) masters, so a second
// holder needs 2k + 1 of the first holder's masters to have lost its lock
// silently: the mode survives 2k masters losing a lock in ways no check
// sees (the gaps granted.go lists), where a plain quorum survives none.
// The price is availability: locking needs quorum + k masters counting,
// so it survives N − quorum − k masters down instead of N − quorum (with
// 5 masters and k = 1: one down instead of two). k must be between 0 and
// N − quorum; New returns ErrInvalid otherwise.
func WithExtraVotes(k int) Option {
	return func(o *options) { o.extraVotes = k }
}

func init() {
	guardswitch.Disable = func(g guardswitch.Guard) any { return withGuardOff(g) }
}

// withGuardOff turns one protection off, for negative controls only: it is
// reachable from outside this package only through internal/guardswitch,
// which code outside this repository cannot import. Off is unsafe: without
// the quarantine a master that restarted empty votes at once, with a
// fencing counter back at zero.
func withGuardOff(g guardswitch.Guard) Option {
	switch g {
	case guardswitch.Quarantine:
		return func(o *options) { o.quarantine = false }
	case guardswitch.ClockGuard:
		return func(o *options) { o.clockGuard = false }
	case guardswitch.DataLossCheck:
		return func(o *options) { o.dataLossGuard = false }
	case guardswitch.VoteClock:
		return func(o *options) { o.voteClockGuard = false }
	case guardswitch.ClockReference:
		return func(o *options) { o.clockReference = false }
	case guardswitch.ClockAllowance:
		return func(o *options) { o.clockAllowance = false }
	case guardswitch.SharedClockBounds:
		return func(o *options) { o.sharedClockBounds = false }
	case guardswitch.ExtendNeverShortens:
		return func(o *options) { o.extendNeverShortens = false }
	case guardswitch.StatusQuorum:
		return func(o *options) { o.statusNeedsQuorum = false }
	case guardswitch.GrantedLock:
		return func(o *options) { o.grantedLockCheck = false }
	case guardswitch.RepairKeepsBaselines:
		return func(o *options) { o.repairKeepsBaselines = false }
	case guardswitch.ExtendRestores:
		return func(o *options) { o.noRestore = true }
	case guardswitch.FenceAboveEveryAnswer:
		return func(o *options) { o.fenceAboveEveryAnswer = false }
	case guardswitch.RepairJudgesReads:
		return func(o *options) { o.repairJudgesReads = false }
	}
	panic(fmt.Sprintf("redlock: unknown guard %d", int(g)))
}

// Observer receives measurements from a Client. Calls come from the
// Client's own goroutines and must not block.
type Observer interface {
	// ObserveBatch reports one pipelined round trip to master: how many
	// commands it carried, how long it took, and its connection error if any.
	ObserveBatch(master int, size int, d time.Duration, err error)
	// ObserveProbe reports one health probe of master.
	ObserveProbe(master int, up bool, d time.Duration)
}
