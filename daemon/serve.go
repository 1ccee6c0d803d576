package daemon

// Serving and stopping: Run and Serve, the HTTP servers, the graceful stop
// and the connections it waits for.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
)

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
//  3. the listener stops completing new connections (quiesce), acquires
//     waiting for a held lock stop waiting and answer (acquired:false,
//     wait_stopped, see AcquireRequest.StopWaiting), the listener
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
	s.limits.Start()
	defer s.limits.Close()
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
	if s.onListening != nil {
		s.onListening()
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
		ReadTimeout:       s.readTimeout,
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
	// The waits end only now that no new connection completes: a waiter
	// resends at once on a new connection (wait_stopped), and one that
	// connected just before the listener closed would be reset after
	// sending its request (its handshake's last ACK dropped by quiesce's
	// filter) instead of being refused with nothing sent.
	close(s.stopWaits)
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
