package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Headers of the Idempotency-Key convention (IETF draft "The
// Idempotency-Key HTTP Header Field").
const (
	// HeaderIdempotencyKey carries the client's key.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderIdempotencyFence carries the attempt's fencing token to the
	// handler (and, through the gateway, to the upstream).
	HeaderIdempotencyFence = "Idempotency-Fence"
	// HeaderIdempotencyTakeover is "true" on a request whose earlier
	// attempt's lease ended without an answer: reconcile first.
	HeaderIdempotencyTakeover = "Idempotency-Takeover"
	// HeaderIdempotentReplayed is "true" on a replayed answer.
	HeaderIdempotentReplayed = "Idempotent-Replayed"
)

// ReplayedHeaders are the response headers stored with an answer and
// replayed; the others are not kept.
var ReplayedHeaders = []string{"Content-Type", "Content-Encoding", "Content-Language", "Location", "Etag", "Last-Modified", "Link", "Cache-Control"}

// MiddlewareOptions configure Middleware.
type MiddlewareOptions struct {
	// Require says whether a POST or PATCH request must carry
	// Idempotency-Key: without it, one is refused with 400 (as the IETF
	// draft says), and passed through without a record when Require is nil
	// or reports false.
	Require func(*http.Request) bool
	// Namespace scopes the key, for example by the authenticated user; nil
	// means no namespace.
	Namespace func(*http.Request) string
	// MaxBodyBytes caps the request body read for the fingerprint (larger:
	// 413). Default 1 MiB.
	MaxBodyBytes int64
	// MaxAnswerBytes caps the response body stored; a larger body is sent
	// to the client but stored empty. Default 64 KiB (the daemon's cap).
	MaxAnswerBytes int
	// Options are passed to every Begin (lease, retention).
	Options []IdemOption
}

// attemptKey is the context key of the request's Attempt.
type attemptKey struct{}

// AttemptFrom returns the idempotency attempt of a request Middleware
// passed to its handler.
func AttemptFrom(ctx context.Context) (Attempt, bool) {
	a, ok := ctx.Value(attemptKey{}).(Attempt)
	return a, ok
}

// RequestFingerprint is the canonical fingerprint of an HTTP request for
// Middleware and the gateway: the lowercase hex SHA-256 of
//
//	method "\n" request-target "\n" body
//
// with the request-target as sent (path and query, RFC 9112 origin-form)
// and the body's exact bytes.
func RequestFingerprint(method, target string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(method))
	h.Write([]byte{'\n'})
	h.Write([]byte(target))
	h.Write([]byte{'\n'})
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// Middleware makes POST and PATCH requests that carry Idempotency-Key run
// next at most once per key, and replays the first answer (status, the
// ReplayedHeaders, body) to every retry. While an attempt runs, a retry
// gets 409 with Retry-After; a retry with another body, method or target
// gets 422. The lease is extended while next runs; next's context ends
// if the attempt is taken over. next sees the attempt's fence in the Idempotency-Fence header
// and AttemptFrom. An answer with a 5xx status is not stored: the attempt
// is aborted so that a retry runs next again. The daemon being unreachable
// answers 503.
func Middleware(c *Client, o MiddlewareOptions, next http.Handler) http.Handler {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 1 << 20
	}
	if o.MaxAnswerBytes <= 0 {
		o.MaxAnswerBytes = 64 << 10
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost && r.Method != http.MethodPatch {
			next.ServeHTTP(w, r)
			return
		}
		key := r.Header.Get(HeaderIdempotencyKey)
		if key == "" {
			if o.Require != nil && o.Require(r) {
				http.Error(w, "the Idempotency-Key header is required on this route", http.StatusBadRequest)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, o.MaxBodyBytes+1))
		if err != nil {
			http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if int64(len(body)) > o.MaxBodyBytes {
			http.Error(w, "request body larger than "+strconv.FormatInt(o.MaxBodyBytes, 10)+" bytes", http.StatusRequestEntityTooLarge)
			return
		}
		opts := o.Options
		if o.Namespace != nil {
			opts = append(append([]IdemOption(nil), opts...), WithIdemNamespace(o.Namespace(r)))
		}
		res, err := c.Begin(r.Context(), key, RequestFingerprint(r.Method, r.URL.RequestURI(), body), opts...)
		if err != nil {
			refuse(w, err)
			return
		}
		if res.Replay != nil {
			replay(w, res.Replay)
			return
		}
		a := res.Attempt
		r2 := r.Clone(context.WithValue(r.Context(), attemptKey{}, *a))
		r2.Body = io.NopCloser(bytes.NewReader(body))
		r2.ContentLength = int64(len(body))
		r2.Header.Set(HeaderIdempotencyFence, strconv.FormatInt(a.Fence, 10))
		if a.Takeover {
			r2.Header.Set(HeaderIdempotencyTakeover, "true")
		} else {
			r2.Header.Del(HeaderIdempotencyTakeover)
		}
		rec := &recorder{ResponseWriter: w, max: o.MaxAnswerBytes}
		work, cancel := context.WithCancel(r2.Context())
		stop := c.keepAttempt(work, cancel, a, leaseOf(opts))
		next.ServeHTTP(rec, r2.WithContext(work))
		stop()
		cancel()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
		defer cancel()
		if rec.status >= 500 {
			_ = c.Abort(ctx, a)
			return
		}
		_ = c.Complete(ctx, a, rec.answer())
	})
}

// refuse answers a Begin that did not start an attempt.
func refuse(w http.ResponseWriter, err error) {
	var e *Error
	errors.As(err, &e)
	switch {
	case errors.Is(err, ErrInProgress):
		secs := int64(1)
		if e != nil && e.RetryAfter > 0 {
			secs = int64((e.RetryAfter + time.Second - 1) / time.Second)
		}
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		http.Error(w, "a request with this Idempotency-Key is being processed; retry later", http.StatusConflict)
	case errors.Is(err, ErrFingerprintMismatch):
		http.Error(w, "this Idempotency-Key was used with another request", http.StatusUnprocessableEntity)
	case errors.Is(err, ErrInvalid):
		msg := err.Error()
		if e != nil {
			msg = e.Msg
		}
		http.Error(w, "Idempotency-Key: "+msg, http.StatusBadRequest)
	default:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "idempotency records unavailable; retry later", http.StatusServiceUnavailable)
	}
}

// replay writes a stored answer.
func replay(w http.ResponseWriter, a *Answer) {
	h := w.Header()
	for k, v := range a.Headers {
		h.Set(k, v)
	}
	h.Set(HeaderIdempotentReplayed, "true")
	h.Set("Content-Length", strconv.Itoa(len(a.Body)))
	w.WriteHeader(a.Status)
	_, _ = w.Write(a.Body)
}

// recorder passes a response through and keeps its status, the replayed
// headers and up to max bytes of body.
type recorder struct {
	http.ResponseWriter
	status    int
	max       int
	body      bytes.Buffer
	overflow  bool
	headers   map[string]string
	wroteHead bool
}

func (r *recorder) WriteHeader(code int) {
	if r.wroteHead {
		return
	}
	r.wroteHead, r.status = true, code
	r.headers = map[string]string{}
	for _, k := range ReplayedHeaders {
		if v := r.Header().Get(k); v != "" {
			r.headers[k] = v
		}
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wroteHead {
		r.WriteHeader(http.StatusOK)
	}
	if !r.overflow {
		if r.body.Len()+len(b) > r.max {
			r.overflow = true
			r.body.Reset()
		} else {
			r.body.Write(b)
		}
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// answer is what is stored: a body above the cap is stored empty, with
// its headers and status.
func (r *recorder) answer() Answer {
	if !r.wroteHead {
		r.WriteHeader(http.StatusOK)
	}
	return Answer{Status: r.status, Headers: r.headers, Body: bytes.Clone(r.body.Bytes())}
}
