package daemon

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/redlockd/redlockd/daemon/limits"
	"github.com/redlockd/redlockd/redlock"
)

// MaxAccountBytes is the longest account name, in bytes (the
// configuration's limit on api_keys[].name).
const MaxAccountBytes = 64

// APIKey is one account (tenant) allowed to call the action API.
type APIKey struct {
	// Account names the tenant; its locks live in a space of their own.
	// Non-empty valid UTF-8, at most MaxAccountBytes. Accounts must be
	// unique.
	Account string
	// Hash is the SHA-256 of the key clients send in X-API-Key. The daemon
	// never holds the key itself and compares hashes in constant time.
	Hash [32]byte
	// Limits are the account's quota, rate limit and cap on held locks;
	// the zero value limits nothing. Any limit needs Options.LimitStore.
	Limits limits.Limits
	// LockDelay is the lock-delay of the account's acquires that send no
	// lock_delay_ms (one that sends it, 0 included, keeps its own): 0
	// (none) to redlock.MaxLockDelay, whole milliseconds. An acquire whose
	// ttl + LockDelay is above MaxTTL is refused with a 400 naming both.
	LockDelay time.Duration
	// MaxIdempotencyBytes caps the bytes the account's idempotency records
	// take on each master (idempotency.Budget): an idem_begin of a new
	// record past it is refused with 429 records_budget_full. 0: no cap
	// (still counted, so that a cap set by a reload finds them).
	MaxIdempotencyBytes int64
}

// Defaults for Options fields left at their zero value.
const (
	DefaultTTL             = 30 * time.Second
	DefaultMaxTTL          = redlock.DefaultMaxTTL // 24h
	DefaultMaxBodyBytes    = 16 << 10
	DefaultShutdownTimeout = 10 * time.Second
)

// Options configures a Server. New copies it; later changes have no effect.
type Options struct {
	// Listen is the host:port Run listens on. Required by Run, not by Serve.
	Listen string
	// APIKeys are the accounts. At least one.
	APIKeys []APIKey
	// KeyPrefix starts every Redis key the daemon uses; see redisKey in
	// keys.go for the layout. May be empty.
	KeyPrefix string
	// DefaultTTL is the TTL of a request without ttl. Default 30s
	// (DefaultTTL), lowered to MaxTTL if that is smaller; 1s to MaxTTL,
	// whole seconds (the API's ttl is in seconds).
	DefaultTTL time.Duration
	// MaxTTL is the largest ttl a request may ask for. Default 24h
	// (DefaultMaxTTL); 1s to 24h, whole seconds.
	MaxTTL time.Duration
	// MaxWait is the largest wait_ms a request may ask for, rounded down to
	// whole milliseconds. 0 (the zero value) allows no waiting: wait_ms
	// must then be 0 or absent. Not negative.
	MaxWait time.Duration
	// MaxWaiters caps the acquires waiting (wait_ms > 0) in this daemon,
	// and MaxWaitersPerAccount those of one account; one more is answered
	// 429 too_many_waiters. Defaults 10000 (DefaultMaxWaiters) and 1000
	// (DefaultMaxWaitersPerAccount). Not negative.
	MaxWaiters, MaxWaitersPerAccount int
	// MaxBodyBytes limits a request body; a larger one is answered 413.
	// Default 16384 (DefaultMaxBodyBytes); at least 64.
	MaxBodyBytes int64
	// ShutdownTimeout bounds how long in-flight requests may run after the
	// drain delay; after it, their contexts are cancelled (an acquire then
	// cleans up after itself), their connections are closed and the count
	// is logged. Default 10s (DefaultShutdownTimeout).
	ShutdownTimeout time.Duration
	// DrainDelay is how long, after the context is cancelled, the server
	// keeps serving with /readyz answering 503 and every answer carrying
	// Connection: close before it stops accepting connections, so that
	// load balancers stop sending traffic and keep-alive clients move to
	// new connections first. Default 0.
	DrainDelay time.Duration
	// Locker serves the locks. Required; NewRedlockLocker adapts a
	// *redlock.Client.
	Locker Locker
	// Health is what /readyz, /metrics, the dashboard and the 503
	// quorum_unavailable answers read about the masters behind Locker.
	// Required. The Lockers this package makes (NewRedlockLocker,
	// NewGroupsLocker, NewMovingLocker) are MasterLockers: pass the same
	// value as Locker and as Health.
	Health MasterHealth
	// Metrics receives the daemon's metrics. Default: a new Metrics on a
	// new registry of its own.
	Metrics *Metrics
	// Gatherer is what GET /metrics serves. Default: the registerer given
	// to NewMetrics, which must then be a prometheus.Gatherer.
	Gatherer prometheus.Gatherer
	// AdminListen, if set, is the host:port of the admin listener, which
	// Serve opens beside the public one: the operator endpoints (see
	// adminRoutes) move there, with GET /healthz and GET /readyz. Default
	// "": they stay on the public listener, and POST /admin/reload and
	// GET /admin/locks are not served.
	AdminListen string
	// AuthFailuresPerMinute, AuthFailureBurst and AuthFailureSources limit
	// failed authentications per source (client IPv4 address or IPv6 /64):
	// each request to the action API without a valid X-API-Key takes a
	// token from its source's bucket (AuthFailureBurst tokens, refilled at
	// AuthFailuresPerMinute); a source with none left gets 429
	// too_many_auth_failures, whatever key it sends, until one is back. At
	// most AuthFailureSources sources are remembered (the one that failed
	// least recently is forgotten first). Defaults 60, 20 and 10000; not
	// negative.
	AuthFailuresPerMinute, AuthFailureBurst, AuthFailureSources int
	// AdminToken, if set, is required on every request to the admin
	// listener ("Authorization: Bearer <token>", or basic authentication
	// with the token as password). Needs AdminListen. SetAdminToken
	// replaces it.
	AdminToken string
	// Reload is what POST /admin/reload runs: read the configuration again
	// and apply what can change without a restart (SetAPIKeys,
	// SetAdminToken, TLS certificates). A *ReloadError answers 400 (the new
	// configuration was refused), any other error 500. Default nil: the
	// endpoint answers 404.
	Reload func(context.Context) (ReloadResult, error)
	// TLS, if set, makes both listeners serve HTTPS (TLS 1.2 at least,
	// HTTP/1.1) with its certificates; see ServerTLS. Default: plain HTTP.
	TLS *ServerTLS
	// LimitStore keeps the accounts' limits on the masters, shared by every
	// daemon serving them (see package limits). Required when an account has a
	// limit; it stays the caller's to Close, after Serve has returned.
	LimitStore *limits.Store
	// LimitsSyncInterval is how often the limits are synced with the
	// masters. Default 100ms (limits.DefaultSyncInterval).
	LimitsSyncInterval time.Duration
	// Idempotency turns on the idempotency actions (idempotency.go); nil
	// leaves them off, answered 400.
	Idempotency *IdempotencyOptions
	// OnListening, when set, is called once Serve has opened every
	// listener (the admin one too) and serves: the moment a caller may
	// say it is serving. Not called when Serve fails before that.
	OnListening func()

	// readTimeout is http.Server's ReadTimeout (a request's headers and
	// body); 0: 30 s. Tests shorten it.
	readTimeout time.Duration
}

// Server is the HTTP daemon: the action API, health, metrics and the
// dashboard, and optionally an admin listener for the operator endpoints.
// Create it with New; serve with Run or Serve, once.
type Server struct {
	log             *zap.Logger
	onListening     func() // Options.OnListening
	locker          Locker
	health          MasterHealth
	metrics         *Metrics
	keys            atomic.Pointer[[]APIKey] // replaced whole by SetAPIKeys
	keysMu          sync.Mutex               // serializes SetAPIKeys
	prefix          string
	lim             lockBounds
	maxBody         int64
	msgTooLarge     string        // the 413 message, built once
	discardLimit    int64         // see discardUnread
	readTimeout     time.Duration // Options.readTimeout
	listen          string
	shutdownTimeout time.Duration
	drainDelay      time.Duration
	handler         http.Handler
	adminHandler    http.Handler // nil without AdminListen
	adminListen     string
	adminToken      atomic.Pointer[[32]byte] // SHA-256 of the admin token, nil without; see SetAdminToken
	reload          func(context.Context) (ReloadResult, error)
	tls             *ServerTLS
	history         *history
	waiters         waiters
	listings        listGate
	limits          *limits.Limiter
	limitStore      *limits.Store
	idem            *idemServer // nil without Options.Idempotency

	// removed are the accounts a reload removed since this daemon
	// started (and no later reload added back): their locks stay until
	// their TTL ends, and GET /admin/locks still lists them.
	removed atomic.Pointer[map[string]bool]

	serving      atomic.Bool
	shuttingDown atomic.Bool
	// stopWaits is closed when the drain delay ends, once the listener
	// completes no new connection and just before it closes: acquires
	// waiting for a held lock answer then (wait_stopped, see
	// AcquireRequest.StopWaiting) instead of being cut off by the
	// shutdown timeout.
	stopWaits chan struct{}
	addr      atomic.Pointer[string]
	adminAddr atomic.Pointer[string]
	inFlight  atomic.Int64
	conns     connTracker
	outage    outage // see lockerFailed
	authLim   *authLimiter
	// authLog logs failed authentications, at most a few lines a second
	// (see authFailed).
	authLog *zap.Logger
	// urlHashes counts the URL parts checkURL hashed, for the tests of
	// its bound.
	urlHashes atomic.Int64
}

// New validates o and returns a Server; it does not listen yet. A nil
// logger logs nothing. Errors name the Options field.
func New(logger *zap.Logger, o *Options) (*Server, error) {
	if o == nil {
		return nil, errors.New("daemon: nil Options")
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	s := &Server{
		log:             logger,
		locker:          o.Locker,
		health:          o.Health,
		metrics:         o.Metrics,
		prefix:          o.KeyPrefix,
		maxBody:         o.MaxBodyBytes,
		listen:          o.Listen,
		shutdownTimeout: o.ShutdownTimeout,
		readTimeout:     o.readTimeout,
		drainDelay:      o.DrainDelay,
		onListening:     o.OnListening,
		adminListen:     o.AdminListen,
		reload:          o.Reload,
		tls:             o.TLS,
		stopWaits:       make(chan struct{}),
	}
	if s.locker == nil {
		return nil, errors.New("daemon: Options.Locker: required")
	}
	if s.health == nil {
		return nil, errors.New("daemon: Options.Health: required (a MasterLocker is its own: pass it as both Locker and Health)")
	}
	keys := append([]APIKey(nil), o.APIKeys...)
	if err := checkAPIKeys(keys); err != nil {
		return nil, err
	}
	s.keys.Store(&keys)
	if o.AdminToken != "" {
		if o.AdminListen == "" {
			return nil, errors.New("daemon: Options.AdminToken: needs AdminListen")
		}
		h := sha256.Sum256([]byte(o.AdminToken))
		s.adminToken.Store(&h)
	}
	lim, err := lockLimits(o)
	if err != nil {
		return nil, err
	}
	s.lim = lim
	if err := s.setWaitersAndAuth(o, logger); err != nil {
		return nil, err
	}
	if err := s.setBodyAndStop(); err != nil {
		return nil, err
	}
	gatherer, err := s.gathererFor(o)
	if err != nil {
		return nil, err
	}
	if err := s.newLimiter(o); err != nil {
		return nil, err
	}
	idem, err := newIdemServer(o.Idempotency)
	if err != nil {
		return nil, fmt.Errorf("daemon: Options.Idempotency: %w", err)
	}
	s.idem = idem
	s.metrics.bind(s.health)
	s.history = newHistory(s.metrics, s.health, time.Now())
	s.handler, s.adminHandler = s.routes(gatherer)
	return s, nil
}

// lockLimits checks and defaults the lock actions' limits: MaxTTL (1s to
// DefaultMaxTTL), DefaultTTL (1s to MaxTTL), both whole seconds as the
// API's ttl is, and MaxWait.
func lockLimits(o *Options) (lockBounds, error) {
	maxTTL := cmp.Or(o.MaxTTL, DefaultMaxTTL)
	if err := checkTTL(maxTTL, DefaultMaxTTL, DefaultMaxTTL.String()); err != nil {
		return lockBounds{}, fmt.Errorf("daemon: Options.MaxTTL: %w", err)
	}
	defTTL := o.DefaultTTL
	if defTTL == 0 {
		defTTL = min(DefaultTTL, maxTTL)
	}
	if err := checkTTL(defTTL, maxTTL, "MaxTTL ("+maxTTL.String()+")"); err != nil {
		return lockBounds{}, fmt.Errorf("daemon: Options.DefaultTTL: %w", err)
	}
	if o.MaxWait < 0 {
		return lockBounds{}, fmt.Errorf("daemon: Options.MaxWait: %v is negative", o.MaxWait)
	}
	return lockBounds{defaultTTL: int64(defTTL / time.Second), maxTTL: int64(maxTTL / time.Second), maxWaitMS: o.MaxWait.Milliseconds()}, nil
}

// checkTTL checks that ttl is a whole number of seconds, 1s to limit
// (named so in the error).
func checkTTL(ttl, limit time.Duration, name string) error {
	switch {
	case ttl < time.Second || ttl > limit:
		return fmt.Errorf("%v is outside 1s to %s", ttl, name)
	case ttl%time.Second != 0:
		return fmt.Errorf("%v is not a whole number of seconds, as the API's ttl is", ttl)
	}
	return nil
}

// setWaitersAndAuth sets the waiters' caps and the limiter of failed
// authentications (with its sampled log), each defaulted, none negative.
func (s *Server) setWaitersAndAuth(o *Options, logger *zap.Logger) error {
	if o.MaxWaiters < 0 || o.MaxWaitersPerAccount < 0 {
		return fmt.Errorf("daemon: Options.MaxWaiters %d, MaxWaitersPerAccount %d: must not be negative", o.MaxWaiters, o.MaxWaitersPerAccount)
	}
	if o.AuthFailuresPerMinute < 0 || o.AuthFailureBurst < 0 || o.AuthFailureSources < 0 {
		return fmt.Errorf("daemon: Options.AuthFailuresPerMinute %d, AuthFailureBurst %d, AuthFailureSources %d: must not be negative",
			o.AuthFailuresPerMinute, o.AuthFailureBurst, o.AuthFailureSources)
	}
	s.authLim = newAuthLimiter(cmp.Or(o.AuthFailuresPerMinute, DefaultAuthFailuresPerMinute),
		cmp.Or(o.AuthFailureBurst, DefaultAuthFailureBurst), cmp.Or(o.AuthFailureSources, DefaultAuthFailureSources))
	s.authLog = logger.Named("auth").WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, time.Second, authLogsPerSecond, 0)
	}))
	s.waiters = waiters{max: cmp.Or(o.MaxWaiters, DefaultMaxWaiters), perAccount: cmp.Or(o.MaxWaitersPerAccount, DefaultMaxWaitersPerAccount)}
	return nil
}

// setBodyAndStop defaults and checks the body limit (at least 64 bytes)
// and the shutdown timeout and drain delay (not negative).
func (s *Server) setBodyAndStop() error {
	if s.maxBody == 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.maxBody < 64 {
		return fmt.Errorf("daemon: Options.MaxBodyBytes: %d is below the minimum of 64", s.maxBody)
	}
	s.discardLimit = max(discardMinBytes, discardFactor*s.maxBody)
	s.readTimeout = cmp.Or(s.readTimeout, 30*time.Second)
	s.msgTooLarge = "body: larger than the limit of " + strconv.FormatInt(s.maxBody, 10) + " bytes"
	if s.shutdownTimeout == 0 {
		s.shutdownTimeout = DefaultShutdownTimeout
	}
	if s.shutdownTimeout < 0 {
		return fmt.Errorf("daemon: Options.ShutdownTimeout: %v is negative", s.shutdownTimeout)
	}
	if s.drainDelay < 0 {
		return fmt.Errorf("daemon: Options.DrainDelay: %v is negative", s.drainDelay)
	}
	return nil
}

// gathererFor is what /metrics serves: Options.Gatherer, or the registry
// of the Metrics New made, or the gatherer of the registerer given to
// NewMetrics.
func (s *Server) gathererFor(o *Options) (prometheus.Gatherer, error) {
	gatherer := o.Gatherer
	if s.metrics == nil {
		reg := prometheus.NewRegistry()
		s.metrics = NewMetrics(reg)
		if gatherer == nil {
			gatherer = reg
		}
	}
	if gatherer == nil {
		gatherer = s.metrics.gatherer
	}
	if gatherer == nil {
		return nil, errors.New("daemon: Options.Gatherer: required when the registerer given to NewMetrics is not a prometheus.Gatherer")
	}
	return gatherer, nil
}

func checkAPIKeys(keys []APIKey) error {
	if len(keys) == 0 {
		return errors.New("daemon: Options.APIKeys: at least one is required")
	}
	accounts := make(map[string]int, len(keys))
	hashes := make(map[[32]byte]int, len(keys))
	for i, k := range keys {
		switch {
		case k.Account == "" || !utf8.ValidString(k.Account):
			return fmt.Errorf("daemon: Options.APIKeys[%d].Account: must be non-empty valid UTF-8", i)
		case len(k.Account) > MaxAccountBytes:
			return fmt.Errorf("daemon: Options.APIKeys[%d].Account: %d bytes, the limit is %d", i, len(k.Account), MaxAccountBytes)
		case k.Hash == [32]byte{}:
			return fmt.Errorf("daemon: Options.APIKeys[%d] (%s).Hash: missing", i, k.Account)
		}
		if j, dup := accounts[k.Account]; dup {
			return fmt.Errorf("daemon: Options.APIKeys[%d].Account: %q is also APIKeys[%d]", i, k.Account, j)
		}
		if err := checkLockDelay(k.LockDelay); err != nil {
			return fmt.Errorf("daemon: Options.APIKeys[%d] (%s).LockDelay: %w", i, k.Account, err)
		}
		if j, dup := hashes[k.Hash]; dup {
			return fmt.Errorf("daemon: Options.APIKeys[%d] (%s).Hash: the same key as APIKeys[%d]", i, k.Account, j)
		}
		accounts[k.Account], hashes[k.Hash] = i, i
	}
	return nil
}

// routes builds the public handler and, with AdminListen, the admin
// handler (see publicRoutes and adminRoutes).
func (s *Server) routes(gatherer prometheus.Gatherer) (public, admin http.Handler) {
	pub := s.publicRoutes()
	adm := s.adminRoutes(gatherer)
	if s.adminListen == "" {
		for _, r := range adm {
			if r.publicWithoutAdmin {
				pub = append(pub, r)
			}
		}
		return s.guard(s.checkURLs(s.mux(pub))), nil
	}
	probes := []route{
		{pattern: "GET /healthz", handler: s.serveHealthz},
		{pattern: "GET /readyz", handler: s.serveReadyz},
	}
	return s.guard(s.checkURLs(s.mux(pub))), s.guard(s.adminAuth(s.checkURLs(s.mux(append(probes, adm...)))))
}

// checkURLs refuses, before routing, the URLs checkURL refuses, so that
// every route (and ServeMux's redirects, which repeat the path and query
// in Location) refuses the same URLs the same way.
func (s *Server) checkURLs(mux http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status, msg := s.checkURL(r); status != 0 {
			code := codeBadRequest
			if status == http.StatusRequestURITooLong {
				code = codeURITooLong
			}
			writeError(w, status, code, msg)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// serveNotFound answers a path no route matches with the JSON envelope:
// 404, code not_found, a msg naming the path (cut to maxPathEcho bytes)
// and listing the listener's endpoints (endpoints, built by mux). checkURL
// has refused a path whose segment is an API key before; a key inside a
// segment ("/v1/x<key>", "/v1/lock;api_key=<key>") is not a segment, and
// the cut keeps it from being echoed whole.
//
// Paths ServeMux cleans ("//v1/lock", "/v1/./lock") are not answered here:
// ServeMux redirects them to the clean path first (307, which clients
// follow with the method and body). That is left as it is: the redirect
// lands on the real endpoint, and checkURL keeps it from echoing a
// credential in Location.
func (s *Server) serveNotFound(w http.ResponseWriter, r *http.Request, endpoints string) {
	writeError(w, http.StatusNotFound, codeNotFound, "unknown path "+quoteCut(r.URL.Path, maxPathEcho)+endpoints)
}

// maxPathEcho is how much of an unknown path a 404 repeats: one byte less
// than the shortest API key (config: 16 bytes), so that no key sent
// anywhere in a path comes back whole.
const maxPathEcho = 15

// Handler returns the daemon's HTTP handler, for tests (httptest) and for
// embedding. It never reports shutting down; only Run and Serve do.
func (s *Server) Handler() http.Handler { return s.handler }

// AdminHandler returns the admin listener's handler, or nil without
// Options.AdminListen.
func (s *Server) AdminHandler() http.Handler { return s.adminHandler }

// AdminAddr returns the address of the admin listener once Serve has
// opened it, or "".
func (s *Server) AdminAddr() string {
	if a := s.adminAddr.Load(); a != nil {
		return *a
	}
	return ""
}
