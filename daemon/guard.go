package daemon

// The request guard every request passes: in-flight counting, a panic
// turned into a 500, and the body a handler leaves unread drained within
// bounds.

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

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
