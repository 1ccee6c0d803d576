package daemon

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/redlockd/redlockd/redlock"
)

// APIKey is one account (tenant) allowed to call the action API.
type APIKey struct {
	// Account names the tenant; its locks live in a space of their own.
	// Non-empty valid UTF-8. Accounts must be unique.
	Account string
	// Hash is the SHA-256 of the key clients send in X-API-Key. The daemon
	// never holds the key itself and compares hashes in constant time.
	Hash [32]byte
	// Limits are the account's quota, rate limit and cap on held locks;
	// the zero value limits nothing. Any limit needs Options.LimitStore.
	Limits AccountLimits
}

// Defaults for Options fields left at their zero value.
const (
	DefaultTTL             = 30
	DefaultMaxTTL          = int(redlock.DefaultMaxTTL / time.Second)
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
	// DefaultTTL is the TTL, in seconds, of a request without ttl.
	// Default 30 (DefaultTTL), lowered to MaxTTL if that is smaller;
	// 1 to MaxTTL.
	DefaultTTL int
	// MaxTTL is the largest ttl, in seconds, a request may ask for.
	// Default 86400 (DefaultMaxTTL); 1 to 86400.
	MaxTTL int
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
	// daemon serving them (see limits.go). Required when an account has a
	// limit; it stays the caller's to Close, after Serve has returned.
	LimitStore *LimitStore
	// LimitsSyncInterval is how often the limits are synced with the
	// masters. Default 100ms (DefaultLimitsSyncInterval).
	LimitsSyncInterval time.Duration
	// Idempotency turns on the idempotency actions (idempotency.go); nil
	// leaves them off, answered 400.
	Idempotency *IdempotencyOptions
}

// Server is the HTTP daemon: the action API, health, metrics and the
// dashboard, and optionally an admin listener for the operator endpoints.
// Create it with New; serve with Run or Serve, once.
type Server struct {
	log             *zap.Logger
	locker          Locker
	metrics         *Metrics
	keys            atomic.Pointer[[]APIKey] // replaced whole by SetAPIKeys
	keysMu          sync.Mutex               // serializes SetAPIKeys
	prefix          string
	lim             limits
	maxBody         int64
	msgTooLarge     string // the 413 message, built once
	discardLimit    int64  // see discardUnread
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
	limits          *limiter
	idem            *idemServer // nil without Options.Idempotency

	// removed are the accounts a reload removed since this daemon
	// started (and no later reload added back): their locks stay until
	// their TTL ends, and GET /admin/locks still lists them.
	removed atomic.Pointer[map[string]bool]

	serving      atomic.Bool
	shuttingDown atomic.Bool
	// stopWaits is closed when the drain delay ends, before the listener
	// closes: acquires waiting for a held lock answer then (see
	// AcquireRequest.StopWaiting) instead of being cut off by the shutdown
	// timeout.
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
		metrics:         o.Metrics,
		prefix:          o.KeyPrefix,
		maxBody:         o.MaxBodyBytes,
		listen:          o.Listen,
		shutdownTimeout: o.ShutdownTimeout,
		drainDelay:      o.DrainDelay,
		adminListen:     o.AdminListen,
		reload:          o.Reload,
		tls:             o.TLS,
		stopWaits:       make(chan struct{}),
	}
	if s.locker == nil {
		return nil, errors.New("daemon: Options.Locker: required")
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
	maxTTL := o.MaxTTL
	if maxTTL == 0 {
		maxTTL = DefaultMaxTTL
	}
	if maxTTL < 1 || maxTTL > DefaultMaxTTL {
		return nil, fmt.Errorf("daemon: Options.MaxTTL: %d is outside 1 to %d seconds", maxTTL, DefaultMaxTTL)
	}
	defTTL := o.DefaultTTL
	if defTTL == 0 {
		defTTL = min(DefaultTTL, maxTTL)
	}
	if defTTL < 1 || defTTL > maxTTL {
		return nil, fmt.Errorf("daemon: Options.DefaultTTL: %d is outside 1 to MaxTTL (%d) seconds", defTTL, maxTTL)
	}
	if o.MaxWaiters < 0 || o.MaxWaitersPerAccount < 0 {
		return nil, fmt.Errorf("daemon: Options.MaxWaiters %d, MaxWaitersPerAccount %d: must not be negative", o.MaxWaiters, o.MaxWaitersPerAccount)
	}
	if o.AuthFailuresPerMinute < 0 || o.AuthFailureBurst < 0 || o.AuthFailureSources < 0 {
		return nil, fmt.Errorf("daemon: Options.AuthFailuresPerMinute %d, AuthFailureBurst %d, AuthFailureSources %d: must not be negative",
			o.AuthFailuresPerMinute, o.AuthFailureBurst, o.AuthFailureSources)
	}
	s.authLim = newAuthLimiter(cmp.Or(o.AuthFailuresPerMinute, DefaultAuthFailuresPerMinute),
		cmp.Or(o.AuthFailureBurst, DefaultAuthFailureBurst), cmp.Or(o.AuthFailureSources, DefaultAuthFailureSources))
	s.authLog = logger.Named("auth").WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, time.Second, authLogsPerSecond, 0)
	}))
	s.waiters = waiters{max: cmp.Or(o.MaxWaiters, DefaultMaxWaiters), perAccount: cmp.Or(o.MaxWaitersPerAccount, DefaultMaxWaitersPerAccount)}
	if o.MaxWait < 0 {
		return nil, fmt.Errorf("daemon: Options.MaxWait: %v is negative", o.MaxWait)
	}
	s.lim = limits{defaultTTL: int64(defTTL), maxTTL: int64(maxTTL), maxWaitMS: o.MaxWait.Milliseconds()}
	if s.maxBody == 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.maxBody < 64 {
		return nil, fmt.Errorf("daemon: Options.MaxBodyBytes: %d is below the minimum of 64", s.maxBody)
	}
	s.discardLimit = max(discardMinBytes, discardFactor*s.maxBody)
	s.msgTooLarge = "body: larger than the limit of " + strconv.FormatInt(s.maxBody, 10) + " bytes"
	if s.shutdownTimeout == 0 {
		s.shutdownTimeout = DefaultShutdownTimeout
	}
	if s.shutdownTimeout < 0 {
		return nil, fmt.Errorf("daemon: Options.ShutdownTimeout: %v is negative", s.shutdownTimeout)
	}
	if s.drainDelay < 0 {
		return nil, fmt.Errorf("daemon: Options.DrainDelay: %v is negative", s.drainDelay)
	}
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
	if err := s.newLimiter(o); err != nil {
		return nil, err
	}
	idem, err := newIdemServer(o.Idempotency)
	if err != nil {
		return nil, fmt.Errorf("daemon: Options.Idempotency: %w", err)
	}
	s.idem = idem
	s.metrics.bind(s.locker)
	s.history = newHistory(s.metrics, s.locker, time.Now())
	s.handler, s.adminHandler = s.routes(gatherer)
	return s, nil
}

func (s *Server) newLimiter(o *Options) error {
	interval := cmp.Or(o.LimitsSyncInterval, DefaultLimitsSyncInterval)
	if interval < 0 {
		return fmt.Errorf("daemon: Options.LimitsSyncInterval: %v is negative", interval)
	}
	keys := *s.keys.Load()
	if err := checkLimits(keys, o.LimitStore); err != nil {
		return err
	}
	s.limits = newLimiter(s.log.Named("limits"), o.LimitStore, s.prefix, interval, s.metrics)
	s.limits.setKeys(keys)
	s.metrics.limits.limiter.Store(s.limits)
	return nil
}

// checkLimits checks the accounts' limits; any limit needs a store.
func checkLimits(keys []APIKey, store *LimitStore) error {
	for i, k := range keys {
		l := k.Limits
		switch {
		case l.QuotaCalls < 0 || l.Rate < 0 || math.IsNaN(l.Rate) || l.Burst < 0 || l.MaxLocks < 0:
			return fmt.Errorf("daemon: Options.APIKeys[%d] (%s).Limits: negative", i, k.Account)
		case (l.QuotaCalls > 0) != (l.QuotaWindow >= time.Millisecond):
			return fmt.Errorf("daemon: Options.APIKeys[%d] (%s).Limits: QuotaCalls %d and QuotaWindow %v: set both (the window at least 1ms) or neither", i, k.Account, l.QuotaCalls, l.QuotaWindow)
		case l.Rate > 0 && l.Burst < 1:
			return fmt.Errorf("daemon: Options.APIKeys[%d] (%s).Limits.Burst: %d, need at least 1 with a rate", i, k.Account, l.Burst)
		case l.any() && store == nil:
			return fmt.Errorf("daemon: Options.LimitStore: required, since account %s has limits", k.Account)
		}
	}
	return nil
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
		case k.Hash == [32]byte{}:
			return fmt.Errorf("daemon: Options.APIKeys[%d] (%s).Hash: missing", i, k.Account)
		}
		if j, dup := accounts[k.Account]; dup {
			return fmt.Errorf("daemon: Options.APIKeys[%d].Account: %q is also APIKeys[%d]", i, k.Account, j)
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

// Addr returns the address Run or Serve listens on, or "" before it does.
func (s *Server) Addr() string {
	if a := s.addr.Load(); a != nil {
		return *a
	}
	return ""
}

// Run listens on Options.Listen and serves until ctx is cancelled; see
// Serve.
func (s *Server) Run(ctx context.Context) error {
	if s.listen == "" {
		return errors.New("daemon: Options.Listen: required by Run")
	}
	ln, err := net.Listen("tcp", s.listen)
	if err != nil {
		return fmt.Errorf("daemon: listen on %s: %w", s.listen, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx is cancelled, then shuts down gracefully:
//
//  1. /readyz answers 503 at once, and every answer from then on carries
//     Connection: close, so a keep-alive client learns from an answer, not
//     from a connection closed under its next request, that it must
//     reconnect (a POST sent on a connection the server is closing is lost:
//     clients do not resend it);
//  2. for DrainDelay new connections and requests are still served;
//  3. acquires waiting for a held lock stop waiting and answer
//     (acquired:false, see AcquireRequest.StopWaiting), the listener
//     closes, and the connections already accepted get ShutdownTimeout to
//     finish what they send — on a fresh context, not the cancelled one;
//     idle connections are then closed;
//  4. connections still busy after that (a slow handler, or a client
//     still sending its request) are cut off: request contexts cancelled,
//     connections closed, and a warning logs how many.
//
// With Options.AdminListen, Serve first opens the admin listener (an
// error if it cannot) and serves the operator endpoints there until the
// public listener has shut down; requests to it still running then get
// one more second.
//
// Serve returns nil after a shutdown, also one that cut connections off,
// and an error only if serving failed. It closes ln. A Server serves once.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if !s.serving.CompareAndSwap(false, true) {
		_ = ln.Close()
		return errors.New("daemon: Serve or Run called twice")
	}
	addr := ln.Addr().String()
	s.addr.Store(&addr)
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	var admin *http.Server
	adminErrc := make(chan error, 1)
	if s.adminListen != "" {
		aln, err := net.Listen("tcp", s.adminListen)
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("daemon: admin listen on %s: %w", s.adminListen, err)
		}
		a := aln.Addr().String()
		s.adminAddr.Store(&a)
		admin = s.httpServer(s.adminHandler, base, nil)
		go func() { adminErrc <- admin.Serve(framingListener{s.withTLS(aln)}) }()
		defer func() {
			// Operator requests are short; one still running after the
			// public listener's shutdown gets a second, then is cut off.
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if admin.Shutdown(sctx) != nil {
				_ = admin.Close()
			}
		}()
	}
	srv := s.httpServer(s.handler, base, s.conns.track)
	// The limits' first sync runs before the first request is served.
	s.limits.start()
	defer s.limits.close()
	errc := make(chan error, 1)
	// ln itself stays for stop: quiesce works on the TCP listener. The
	// framing scan reads inside TLS: it follows the plaintext requests.
	go func() { errc <- srv.Serve(framingListener{s.withTLS(ln)}) }()
	stopHistory := make(chan struct{})
	historyDone := make(chan struct{})
	go func() {
		defer close(historyDone)
		s.history.run(stopHistory)
	}()
	defer func() {
		close(stopHistory)
		<-historyDone
	}()
	if admin != nil {
		s.log.Info("listening", zap.String("addr", addr), zap.String("admin_addr", s.AdminAddr()))
	} else {
		s.log.Info("listening", zap.String("addr", addr))
	}

	select {
	case err := <-errc:
		_ = srv.Close()
		return fmt.Errorf("daemon: serve on %s: %w", addr, err)
	case err := <-adminErrc:
		_ = srv.Close()
		return fmt.Errorf("daemon: serve admin on %s: %w", s.AdminAddr(), err)
	case <-ctx.Done():
	}
	s.shuttingDown.Store(true)
	s.log.Info("shutting down", zap.Duration("drain_delay", s.drainDelay), zap.Duration("timeout", s.shutdownTimeout))
	if s.drainDelay > 0 {
		t := time.NewTimer(s.drainDelay)
		select {
		case <-t.C:
		case err := <-errc:
			t.Stop()
			_ = srv.Close()
			return fmt.Errorf("daemon: serve on %s: %w", addr, err)
		}
	}
	close(s.stopWaits)
	return s.stop(srv, ln, errc, cancelBase)
}

// withTLS wraps ln in TLS when Options.TLS is set.
func (s *Server) withTLS(ln net.Listener) net.Listener {
	if s.tls == nil {
		return ln
	}
	return tls.NewListener(ln, s.tls.Config())
}

// httpServer is the http.Server of one listener; connState tracks its
// connections for a graceful shutdown (nil: not tracked).
func (s *Server) httpServer(h http.Handler, base context.Context, connState func(net.Conn, http.ConnState)) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          zap.NewStdLog(s.log.Named("http")),
		BaseContext:       func(net.Listener) context.Context { return base },
		ConnContext:       framingContext,
		ConnState:         connState,
		// OPTIONS * reaches the handler like every request, so that the
		// framing scan and the handler count the same requests.
		DisableGeneralOptionsHandler: true,
	}
}

// stop ends serving once the drain delay is over. It closes the listener
// itself rather than calling http.Server.Shutdown at once, because
// Shutdown drops a request that arrives on an accepted connection after
// it was called, closing the connection without an answer. Here every
// connection already accepted is still served (each answer carrying
// Connection: close) until no connection is busy or ShutdownTimeout has
// passed; then the idle ones are closed and the busy ones cut off.
func (s *Server) stop(srv *http.Server, ln net.Listener, errc <-chan error, cancelBase context.CancelFunc) error {
	deadline := time.Now().Add(s.shutdownTimeout)
	quiesce(ln, min(s.shutdownTimeout, time.Second))
	_ = ln.Close()
	var err error
	if serr := <-errc; !errors.Is(serr, net.ErrClosed) {
		err = fmt.Errorf("daemon: serve on %s: %w", s.Addr(), serr)
	}
	if cut := s.conns.waitIdle(deadline); cut > 0 {
		handlers := s.inFlight.Load()
		cancelBase()
		s.log.Warn("shutdown timeout passed: cut off the connections still busy",
			zap.Int("connections_cut", cut), zap.Int64("requests_in_handlers", handlers),
			zap.Duration("timeout", s.shutdownTimeout))
	}
	_ = srv.Close()
	// Handlers whose contexts were cancelled return quickly: an acquire's
	// cleanup is bounded by the per-master timeout.
	s.waitIdle(5 * time.Second)
	s.log.Info("stopped")
	return err
}

// connTracker knows which connections are busy: active ones (a request
// being read or answered) and new ones that may still send their first
// request. Those are what shutting down waits for, and what a shutdown
// that times out cuts off.
type connTracker struct {
	mu    sync.Mutex
	conns map[net.Conn]connInfo
}

type connInfo struct {
	state http.ConnState
	since time.Time // when it became new, for StateNew
}

// silentNew is how long a new connection may send nothing before a
// shutdown stops waiting for it: clients write their request as soon as
// they are connected; a browser's speculative connection may never.
const silentNew = time.Second

// track is the http.Server's ConnState hook.
func (t *connTracker) track(c net.Conn, st http.ConnState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch st {
	case http.StateNew, http.StateActive:
		if t.conns == nil {
			t.conns = make(map[net.Conn]connInfo)
		}
		ci := connInfo{state: st}
		if st == http.StateNew {
			ci.since = time.Now()
		}
		t.conns[c] = ci
	default: // idle, hijacked, closed
		delete(t.conns, c)
	}
}

// busy returns how many connections are active, or new and not yet
// silent for silentNew.
func (t *connTracker) busy() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	now := time.Now()
	for _, ci := range t.conns {
		if ci.state == http.StateActive || now.Sub(ci.since) < silentNew {
			n++
		}
	}
	return n
}

// waitIdle waits until no connection is busy or deadline has passed, and
// returns how many still are.
func (t *connTracker) waitIdle(deadline time.Time) int {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		n := t.busy()
		if n == 0 || !time.Now().Before(deadline) {
			return n
		}
		<-tick.C
	}
}

// waitIdle waits, up to limit, for handlers to return after their contexts
// were cancelled: an acquire's own cleanup is bounded by the per-master
// timeout, so this is short.
func (s *Server) waitIdle(limit time.Duration) {
	deadline := time.Now().Add(limit)
	for s.inFlight.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

// guard counts in-flight requests and turns a panic into a logged 500.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch framingOf(r.Context()) {
		case framingBoth:
			// Neither the body nor what follows it is read: the
			// connection closes after this answer (see framing.go).
			w.Header()["Connection"] = hvClose
			writeError(w, http.StatusBadRequest, codeBadRequest, msgTwoFramings)
			return
		case framingLast:
			w.Header()["Connection"] = hvClose
		}
		s.inFlight.Add(1)
		s.metrics.inFlight.Inc()
		gw := guardPool.Get().(*guardWriter)
		gw.ResponseWriter = w
		gw.closing = &s.shuttingDown
		body := r.Body
		if r.ContentLength != 0 && body != nil && body != http.NoBody {
			gw.body.ReadCloser = body
			r.Body = &gw.body
		}
		defer func() {
			// The server looks at its own body once the handler returns.
			r.Body = body
			s.inFlight.Add(-1)
			s.metrics.inFlight.Dec()
			v := recover()
			if v == nil {
				// The handler has returned and nothing holds gw any more.
				*gw = guardWriter{}
				guardPool.Put(gw)
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("panic in handler", zap.String("path", r.URL.Path), zap.Any("panic", v), zap.StackSkip("stack", 1))
			if !gw.wrote {
				writeError(gw, http.StatusInternalServerError, codeInternal, "internal error; it has been logged")
			}
		}()
		next.ServeHTTP(gw, r)
		s.discardUnread(gw, r)
	})
}

// Bounds of discardUnread: at most max(discardMinBytes, discardFactor ×
// MaxBodyBytes) bytes, for at most discardTimeout.
const (
	discardMinBytes = 4 << 20
	discardFactor   = 64
	discardTimeout  = 3 * time.Second
)

// discardUnread answers first and then takes off the wire the part of the
// request body that the handler did not read (a 413, 401, 404 or 415
// never reads it). Most HTTP clients write the whole body before they
// read the answer; closing a connection with unread data in it makes the
// kernel send a reset, which reaches such a client while it is still
// writing, so it never reads the answer. After the discard the connection
// ends cleanly, or is kept alive when the whole body was read.
//
// The discard is bounded: a body declared larger than discardLimit is not
// read at all, and reading stops after discardLimit bytes or
// discardTimeout; the connection is then closed as it would have been. A
// client that sent Expect: 100-continue and was never told to continue
// sends no body, so nothing is waited for.
func (s *Server) discardUnread(gw *guardWriter, r *http.Request) {
	b := &gw.body
	switch {
	case b.ReadCloser == nil || b.eof:
		return
	case !b.read && expectsContinue(r):
		return
	case r.ContentLength > s.discardLimit:
		return
	}
	rc := http.NewResponseController(gw)
	// Full duplex: the answer goes out now, before the body is read
	// (else the server would discard at most 256 KiB itself and close).
	if rc.EnableFullDuplex() != nil {
		return
	}
	if rc.Flush() != nil {
		return
	}
	_ = rc.SetReadDeadline(time.Now().Add(discardTimeout))
	_, _ = io.CopyN(io.Discard, b.ReadCloser, s.discardLimit)
}

func expectsContinue(r *http.Request) bool {
	for _, v := range r.Header["Expect"] {
		if strings.EqualFold(strings.TrimSpace(v), "100-continue") {
			return true
		}
	}
	return false
}

// bodyWatch wraps a request body to tell whether the handler read from it
// and whether it read it to the end.
type bodyWatch struct {
	io.ReadCloser
	read, eof bool
}

func (b *bodyWatch) Read(p []byte) (int, error) {
	b.read = true
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// guardWriter remembers whether the response was started, so a panic
// after it does not write a second header. They are pooled: one per
// request would be the only allocation of guard.
//
// While the server shuts down, the answer gets Connection: close, so that
// the client closes the connection itself after reading it.
type guardWriter struct {
	http.ResponseWriter
	wrote   bool
	closing *atomic.Bool // the server is shutting down
	body    bodyWatch    // the request body, when there is one
}

var guardPool = sync.Pool{New: func() any { return new(guardWriter) }}

var hvClose = []string{"close"}

func (g *guardWriter) start() {
	if !g.wrote {
		g.wrote = true
		if g.closing.Load() {
			g.Header()["Connection"] = hvClose
		}
	}
}

func (g *guardWriter) WriteHeader(code int) {
	g.start()
	g.ResponseWriter.WriteHeader(code)
}

func (g *guardWriter) Write(b []byte) (int, error) {
	g.start()
	return g.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (g *guardWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }
