package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
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
	// HeaderIdempotentBodyOmitted is set on a replayed answer whose body
	// was above the stored cap: its value is the original body's length in
	// bytes, and the replay carries no body.
	HeaderIdempotentBodyOmitted = "Idempotent-Body-Omitted"
	// HeaderIdempotentHeadersOmitted is set on a replayed answer whose
	// kept headers alone were above MaxAnswerBytes: the names of those
	// left out (the largest first, until the rest fit), comma-separated.
	HeaderIdempotentHeadersOmitted = "Idempotent-Headers-Omitted"
)

// ReplayedHeaders are the response headers stored with an answer and
// replayed; the others are not kept.
var ReplayedHeaders = []string{"Content-Type", "Content-Encoding", "Content-Language", "Location", "Etag", "Last-Modified", "Link", "Cache-Control"}

// listHeaders are the ReplayedHeaders whose value is a comma-separated
// list: several lines of one are kept as one value, joined with ", ". Of
// the others (one value each), the first line is kept.
var listHeaders = map[string]bool{"Content-Encoding": true, "Content-Language": true, "Link": true, "Cache-Control": true}

// MiddlewareOptions configure Middleware.
type MiddlewareOptions struct {
	// Require says whether a POST or PATCH request must carry
	// Idempotency-Key: without it, one is refused with 400 (as the IETF
	// draft says), and passed through without a record when Require is nil
	// or reports false.
	Require func(*http.Request) bool
	// Namespace scopes the key, for example by the authenticated user; nil
	// means no namespace (or NamespaceHeader's).
	Namespace func(*http.Request) string
	// NamespaceHeader, when Namespace is nil, names the request header
	// whose value scopes the key (for example X-User-Id, set by a front
	// proxy). A keyed request without it, with it more than once, or with
	// a value that is not valid UTF-8 is refused with 400: which user a
	// repeated header means is unknowable (a proxy that appends rather
	// than replaces would let a client pick another user's namespace, and
	// replay that user's answers), and a missing one would put every such
	// request in one shared namespace.
	NamespaceHeader string
	// MaxBodyBytes caps the request body read for the fingerprint (larger:
	// 413). Default 1 MiB.
	MaxBodyBytes int64
	// MaxAnswerBytes caps the response body stored; a larger body is sent
	// to the client but stored without its body (Idempotent-Body-Omitted).
	// It counts the body and the replayed headers, as the daemon does.
	// Default 64 KiB (the daemon's cap).
	MaxAnswerBytes int
	// Options are passed to every Begin (lease, retention).
	Options []IdemOption
	// AbortOn5xx says that a 5xx answer of next means that next did
	// nothing: the attempt is aborted and a retry runs next at once as a
	// fresh start. By default (false) a 5xx answer is neither stored nor
	// aborted: a retry runs next again only after the lease ends, with
	// Idempotency-Takeover: true. A proxy must leave it false: an upstream
	// error (or a dropped connection) says nothing about what the upstream
	// did.
	AbortOn5xx bool
	// RunPastLostLease keeps next's context alive when the attempt's lease
	// is lost (an extension answered that the attempt no longer holds it:
	// the lease ended, with a quorum of masters or the daemon out of reach
	// for longer than it, or a take-over began). By default (false) that
	// context is cancelled, so an in-process handler can stop. A proxy sets
	// it: cancelling the upstream call does not undo what the upstream
	// does, it only loses the answer, which is then neither stored nor
	// passed on. Either way the loss is reported (op "lease"), and the
	// answer is stored only if no take-over began (a Complete after the
	// lease ends is refused only once another attempt has begun).
	RunPastLostLease bool
	// MaxHeldAnswerBytes bounds the answer body held back until the answer
	// is stored: an answer of next with a status below 500 reaches the
	// client only after Complete (so a client never has an answer that
	// its retry would not replay), held in memory up to this many bytes
	// (a held answer costs about twice its body; answers held at once add
	// up, with no bound across them). A body declared larger (its
	// Content-Length), or that grows past it, is passed on as it comes,
	// before it is stored (reported, op "answer-sent-before-store"; it is
	// then stored as usual). Default 8 MiB.
	MaxHeldAnswerBytes int
	// OnError is told of every Complete or Abort that failed (op
	// "complete", "abort", "panic" for a handler that panicked, or
	// "answer-cut-off" for one that ended its answer with
	// http.ErrAbortHandler, as httputil.ReverseProxy does when the
	// upstream's answer breaks off), and, where the answer is still
	// stored as usual, of a lost lease (op "lease") and of an answer passed
	// on before its store (op "answer-sent-before-store"), with
	// the client's key (never the token). The answer was then not stored:
	// the attempt stays IN_PROGRESS until its lease ends and a retry is a
	// take-over; except op "complete-without-body": the answer was too
	// large for the daemon, and was stored without its body (its replays
	// say Idempotent-Body-Omitted). It is also told (op "begin") of a Begin refused for a
	// reason that is the service's, not the client's: the daemon refusing
	// the API key (answered 502), the account's quota or rate (503 with
	// the daemon's Retry-After), the options (500), or no answer (503).
	// nil: not reported.
	OnError func(op, key string, err error)
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
// if the attempt is taken over, not when the client goes away (the answer
// is stored all the same, and the retry replays it). next sees the
// attempt's fence in the Idempotency-Fence header and AttemptFrom. An
// answer with a 5xx status is not stored (see AbortOn5xx). An answer
// above MaxAnswerBytes (body and replayed headers) is stored without its
// body, and replayed with Idempotent-Body-Omitted. The daemon being
// unreachable answers 503.
func Middleware(c *Client, o MiddlewareOptions, next http.Handler) http.Handler {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 1 << 20
	}
	if o.MaxAnswerBytes <= 0 {
		o.MaxAnswerBytes = 64 << 10
	}
	if o.MaxHeldAnswerBytes <= 0 {
		o.MaxHeldAnswerBytes = 8 << 20
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Methods are compared as the upstream frameworks do (Django, Flask,
		// Laravel upper-case them): "post" is a POST, and must not slip past
		// the record as an unknown method.
		method := strings.ToUpper(r.Method)
		if method != http.MethodPost && method != http.MethodPatch {
			next.ServeHTTP(w, r)
			return
		}
		if len(r.Header.Values(HeaderIdempotencyKey)) > 1 {
			// Which one the client meant is unknowable: use none.
			http.Error(w, "Idempotency-Key: sent more than once; send one key", http.StatusBadRequest)
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
		if !utf8.ValidString(key) {
			// JSON would carry it with U+FFFD in place of the other
			// bytes: another key's record.
			http.Error(w, "Idempotency-Key: must be valid UTF-8", http.StatusBadRequest)
			return
		}
		var ns string
		switch {
		case o.Namespace != nil:
			ns = o.Namespace(r)
		case o.NamespaceHeader != "":
			vs := r.Header.Values(o.NamespaceHeader)
			switch {
			case len(vs) > 1:
				http.Error(w, o.NamespaceHeader+": sent more than once; which one scopes Idempotency-Key is unknowable", http.StatusBadRequest)
				return
			case len(vs) == 0 || vs[0] == "":
				http.Error(w, o.NamespaceHeader+": required with Idempotency-Key (it scopes the key)", http.StatusBadRequest)
				return
			case !utf8.ValidString(vs[0]):
				http.Error(w, o.NamespaceHeader+": must be valid UTF-8 (it scopes Idempotency-Key)", http.StatusBadRequest)
				return
			}
			ns = vs[0]
		}
		if !utf8.ValidString(ns) {
			// From Namespace: the service's own function, not a header.
			http.Error(w, "the request's namespace (scoping Idempotency-Key): must be valid UTF-8", http.StatusBadRequest)
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
		if o.Namespace != nil || o.NamespaceHeader != "" {
			opts = append(append([]IdemOption(nil), opts...), WithIdemNamespace(ns))
		}
		res, err := c.Begin(r.Context(), key, RequestFingerprint(method, r.URL.RequestURI(), body), opts...)
		if err != nil {
			if refuse(w, err) && o.OnError != nil {
				o.OnError("begin", key, err)
			}
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
		// A proxy as next (httputil.ReverseProxy) removes every header the
		// client named in Connection, as hop-by-hop: the client could take
		// the fence and the take-over flag off the upstream's request, and
		// the key and its namespace header that the upstream looks its
		// earlier work up by (a black-box pass sent "Connection:
		// Idempotency-Key, X-User-Id": the upstream got neither).
		keep := []string{HeaderIdempotencyFence, HeaderIdempotencyTakeover, HeaderIdempotencyKey}
		if o.Namespace == nil && o.NamespaceHeader != "" {
			keep = append(keep, o.NamespaceHeader)
		}
		keepEndToEnd(r2.Header, keep...)
		r2.Header.Set(HeaderIdempotencyFence, strconv.FormatInt(a.Fence, 10))
		if a.Takeover {
			r2.Header.Set(HeaderIdempotencyTakeover, "true")
		} else {
			r2.Header.Del(HeaderIdempotencyTakeover)
		}
		rec := &recorder{ResponseWriter: w, max: o.MaxAnswerBytes, holdMax: o.MaxHeldAnswerBytes}
		// The work does not end with the client's connection: once next
		// starts, its answer is what a retry must get, so it runs to the
		// end and is stored even when nobody reads it. It ends early only
		// when the lease is lost, unless RunPastLostLease.
		work, cancel := context.WithCancel(context.WithoutCancel(r2.Context()))
		defer cancel()
		stop := c.keepAttempt(work, func(err error) {
			if o.RunPastLostLease {
				o.report("lease", a, fmt.Errorf("the attempt's lease was lost (not extended in time, or taken over); the work goes on, and its answer is stored only if no take-over began: %w", err))
				return
			}
			o.report("lease", a, fmt.Errorf("the attempt's lease was lost (not extended in time, or taken over); the work's context is cancelled: %w", err))
			cancel()
		}, a, leaseOf(opts))
		ran := false
		defer func() {
			stop()
			if !ran {
				// next panicked: it may have done its work, so the
				// attempt is left IN_PROGRESS (never aborted): a retry
				// after the lease is a take-over. The panic goes on (to
				// net/http, which drops the connection).
				v := recover()
				if v == http.ErrAbortHandler {
					// How httputil.ReverseProxy ends an answer it could not
					// copy to the end (the upstream cut it off): not a bug.
					o.report("answer-cut-off", a, errors.New("the answer was cut off before its end (the upstream's connection broke); it is not stored, and the attempt is left to its lease"))
				} else {
					o.report("panic", a, fmt.Errorf("the handler panicked (%v); the attempt is left to its lease", v))
				}
				panic(v)
			}
		}()
		next.ServeHTTP(rec, r2.WithContext(work))
		ran = true
		stop()
		// Sent once the answer is stored (or could not be): every return
		// below.
		defer rec.release()
		if rec.passedEarly {
			o.report("answer-sent-before-store", a, fmt.Errorf("the answer's body is above %d bytes (MaxHeldAnswerBytes): it was passed on as it came, before it was stored", rec.holdMax))
		}
		ctx, cancel2 := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
		defer cancel2()
		if rec.status >= 500 {
			if o.AbortOn5xx {
				if err := c.Abort(ctx, a); err != nil {
					o.report("abort", a, err)
				}
			}
			// Otherwise not stored and not aborted: the handler (or the
			// upstream behind a proxy) may have done part of its work
			// before failing, so a retry runs next again only after the
			// lease, as a take-over (Idempotency-Takeover: true).
			return
		}
		ans := rec.answer()
		// A Complete that got no answer (the daemon restarting: its
		// connection refused) is sent again until ctx ends: the same
		// answer again is a retry the daemon accepts, and a client must
		// not get an answer that a retry would not replay (a black-box
		// pass: a daemon killed and restarted within the lease lost the
		// answer, and the upstream ran again as a take-over).
		complete := func(ans Answer) error {
			for {
				err := c.Complete(ctx, a, ans)
				if err == nil || !noAnswer(err) || sleep(ctx, nil, 200*time.Millisecond) != slept {
					return err
				}
			}
		}
		err = complete(ans)
		if errors.Is(err, ErrInvalid) {
			// Refused for its size (the daemon counts the headers too,
			// and its cap, idempotency_max_answer_bytes, may be below
			// MaxAnswerBytes): store the status and headers with a
			// marker instead, and then, if that is refused too, with
			// the largest headers left out until it fits the smallest
			// cap a daemon takes, so that a retry gets a replay that
			// says what is missing rather than running next again.
			first := err
			for _, limit := range []int{rec.max, minDaemonAnswerBytes} {
				smaller := rec.withoutBody(limit)
				if smaller.size() >= ans.size() {
					continue // no smaller than the one refused
				}
				ans = smaller
				if err = complete(ans); !errors.Is(err, ErrInvalid) {
					break
				}
			}
			if err == nil {
				o.report("complete-without-body", a, first)
			}
		}
		if err != nil {
			// Not stored: the attempt stays IN_PROGRESS until its lease
			// ends, and a retry after that is a take-over, never a blind
			// start.
			o.report("complete", a, err)
		}
	})
}

// report passes a failed Complete or Abort to o.OnError.
func (o *MiddlewareOptions) report(op string, a *Attempt, err error) {
	if o.OnError != nil {
		o.OnError(op, a.Key, err)
	}
}

// maxInProgressRetryAfter caps the Retry-After of a 409 in progress, in
// seconds.
const maxInProgressRetryAfter = 5

// refuse answers a Begin that did not start an attempt, and reports
// whether the refusal is the service's own to look into rather than the
// client's (the daemon refusing this service's API key, limits or
// settings, or unavailable).
func refuse(w http.ResponseWriter, err error) (ours bool) {
	var e *Error
	errors.As(err, &e)
	switch {
	case errors.Is(err, ErrUnauthorized), e != nil && e.Code == "too_many_auth_failures":
		// After a burst of refused keys the daemon answers 429 for the
		// source: still this service's API key.
		http.Error(w, "idempotency records unavailable: redlockd refuses this service's API key", http.StatusBadGateway)
		return true
	case e != nil && e.Status == http.StatusTooManyRequests:
		// The service's account is over its quota or rate: the client
		// may retry when the daemon says, not every second.
		secs := int64(1)
		if e.RetryAfter > 0 {
			secs = ceilSeconds(e.RetryAfter)
		}
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		http.Error(w, "idempotency records unavailable: this service's redlockd account is past its limits ("+e.Code+"); retry later", http.StatusServiceUnavailable)
		return true
	case errors.Is(err, ErrInProgress):
		// The holder's lease is extended while it works, so its remaining
		// time is about the whole lease however soon it finishes: the
		// hint is capped at maxInProgressRetryAfter.
		secs := int64(1)
		if e != nil && e.RetryAfter > 0 {
			secs = min(ceilSeconds(e.RetryAfter), maxInProgressRetryAfter)
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
		switch {
		case strings.HasPrefix(msg, "namespace"):
			// The namespace comes from the request (a header the
			// deployment names), not from the key.
			http.Error(w, "the namespace header's value (scoping Idempotency-Key): "+msg, http.StatusBadRequest)
		case strings.HasPrefix(msg, "key"):
			http.Error(w, "Idempotency-Key: "+msg, http.StatusBadRequest)
		default:
			// Not the request's fault: the middleware's own options (a
			// lease or retention the daemon's limits refuse).
			http.Error(w, "the idempotency settings of this service are refused by redlockd: "+msg, http.StatusInternalServerError)
			return true
		}
	default:
		// The daemon's Retry-After when it gave one (a quorum expected back
		// in minutes, or its outage backoff): 1 s told every client to
		// come back each second for as long as the records were out.
		secs := int64(1)
		if e != nil && e.RetryAfter > 0 {
			secs = ceilSeconds(e.RetryAfter)
		}
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		http.Error(w, "idempotency records unavailable; retry later", http.StatusServiceUnavailable)
		return true
	}
	return false
}

// replay writes a stored answer.
func replay(w http.ResponseWriter, a *Answer) {
	h := w.Header()
	for k, v := range a.Headers {
		h.Set(k, v)
	}
	if h.Get("Content-Type") == "" {
		// Stored without one: replayed without one, not with the type
		// net/http would sniff from the body. Read from h, where Set
		// put it under its canonical name: a record stored over HTTP
		// may name it "content-type".
		h["Content-Type"] = nil
	}
	h.Set(HeaderIdempotentReplayed, "true")
	h.Set("Content-Length", strconv.Itoa(len(a.Body)))
	w.WriteHeader(a.Status)
	_, _ = w.Write(a.Body)
}

// recorder keeps a response's status, the replayed headers and up to max
// bytes of body, and holds an answer below 500 back from the client until
// release (up to holdMax bytes of body; a larger one is passed on as it
// comes). An answer of 500 or more is never stored: it is passed through.
type recorder struct {
	http.ResponseWriter
	status  int
	max     int
	body    bytes.Buffer
	holdMax int
	holding bool         // the answer is held back until release
	held    bytes.Buffer // the body held back
	// passedEarly: the body went past holdMax, and the answer was passed
	// on before it was stored.
	passedEarly bool
	overflow    bool
	headers     map[string]string
	wroteHead   bool
	// headerBytes is the replayed headers' names and values, counted
	// against max as the daemon counts them (Answer.Size).
	headerBytes int
	size        int // the whole body's length
	clientGone  bool
}

func (r *recorder) WriteHeader(code int) {
	if r.wroteHead {
		return
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		// An informational answer (103 Early Hints, which a proxy passes
		// on) comes before the final one: passed on, not the answer.
		r.ResponseWriter.WriteHeader(code)
		return
	}
	r.wroteHead, r.status = true, code
	r.headers = map[string]string{}
	for _, k := range ReplayedHeaders {
		v := r.Header().Get(k)
		if listHeaders[k] {
			// Every line of a list-valued header, as one comma-separated
			// value (RFC 9110, section 5.3: the same meaning): a record
			// keeps one value per name, and kept only the first of 20
			// Link lines (a black-box pass).
			v = strings.Join(r.Header().Values(k), ", ")
		}
		if v != "" {
			r.headers[k] = v
			r.headerBytes += len(k) + len(v)
		}
	}
	if code < http.StatusInternalServerError {
		n, err := strconv.ParseInt(r.Header().Get("Content-Length"), 10, 64)
		switch {
		case err == nil && n > int64(r.holdMax):
			// Declared too large to hold: passed on from the start.
			r.passedEarly = true
		case err == nil:
			r.held.Grow(int(n))
			r.holding = true
			return
		default:
			r.holding = true
			return
		}
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wroteHead {
		r.WriteHeader(http.StatusOK)
	}
	r.size += len(b)
	if !r.overflow {
		if r.headerBytes+r.body.Len()+len(b) > r.max {
			r.overflow = true
			r.body.Reset()
		} else {
			r.body.Write(b)
		}
	}
	if r.holding {
		if r.held.Len()+len(b) <= r.holdMax {
			r.held.Write(b)
			return len(b), nil
		}
		// Too large to hold: passed on from here, before it is stored.
		r.passedEarly = true
		r.release()
	}
	r.pass(b)
	return len(b), nil
}

// pass writes b to the client, unless it went away: the answer is still
// recorded to the end and stored, for the retry.
func (r *recorder) pass(b []byte) {
	if r.clientGone {
		return
	}
	if _, err := r.ResponseWriter.Write(b); err != nil {
		r.clientGone = true
	}
}

// release sends the answer held back: its status, headers and body.
func (r *recorder) release() {
	if !r.holding {
		return
	}
	r.holding = false
	r.ResponseWriter.WriteHeader(r.status)
	r.pass(r.held.Bytes())
	r.held = bytes.Buffer{}
}

// Flush passes a flush on only once nothing is held back: a proxy's
// flush (httputil.ReverseProxy flushes streamed answers) would otherwise
// send the answer before it is stored.
func (r *recorder) Flush() {
	if !r.holding {
		_ = http.NewResponseController(r.ResponseWriter).Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// answer is what is stored: a body above the cap (counted with the
// replayed headers) is left out, see withoutBody.
func (r *recorder) answer() Answer {
	if !r.wroteHead {
		r.WriteHeader(http.StatusOK)
	}
	if r.overflow {
		return r.withoutBody(r.max)
	}
	return Answer{Status: r.status, Headers: r.headers, Body: bytes.Clone(r.body.Bytes())}
}

// withoutBody is the answer stored when the body is above the cap: status
// and headers, no body, and Idempotent-Body-Omitted with the body's length.
// When the kept headers alone are above limit, the largest are left out
// too until the rest fits, named in Idempotent-Headers-Omitted: an answer
// the daemon refuses to store is not stored at all, and the upstream ran
// again at every retry after the lease (a black-box pass: a 70 KB Link
// header).
func (r *recorder) withoutBody(limit int) Answer {
	h := make(map[string]string, len(r.headers)+2)
	for k, v := range r.headers {
		if k != "Content-Length" {
			h[k] = v
		}
	}
	h[HeaderIdempotentBodyOmitted] = strconv.Itoa(r.size)
	var left []string
	for (Answer{Headers: h}).size() > limit {
		big := ""
		for k, v := range h {
			if k == HeaderIdempotentBodyOmitted || k == HeaderIdempotentHeadersOmitted {
				continue
			}
			if big == "" || len(k)+len(v) > len(big)+len(h[big]) || len(k)+len(v) == len(big)+len(h[big]) && k < big {
				big = k
			}
		}
		if big == "" {
			break // nothing left to leave out
		}
		delete(h, big)
		left = append(left, big)
		slices.Sort(left)
		h[HeaderIdempotentHeadersOmitted] = strings.Join(left, ", ")
	}
	return Answer{Status: r.status, Headers: h}
}

// minDaemonAnswerBytes is the smallest idempotency_max_answer_bytes a
// daemon takes (docs/configuration.md).
const minDaemonAnswerBytes = 1024

// size is the answer's size as the daemon counts it against its cap
// (Answer.Size in redlock/idempotency, which this package does not
// import): the body's bytes and every header's name and value.
func (a Answer) size() int {
	n := len(a.Body)
	for k, v := range a.Headers {
		n += len(k) + len(v)
	}
	return n
}

// keepEndToEnd removes names from h's Connection header, so that a proxy
// does not drop the headers of those names as hop-by-hop (RFC 9110
// section 7.6.1): they are the middleware's own, set for the upstream.
func keepEndToEnd(h http.Header, names ...string) {
	vs := h.Values("Connection")
	if len(vs) == 0 {
		return
	}
	var kept []string
	for _, v := range vs {
		for tok := range strings.SplitSeq(v, ",") {
			tok = strings.TrimSpace(tok)
			if tok != "" && !slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(n, tok) }) {
				kept = append(kept, tok)
			}
		}
	}
	h.Del("Connection")
	if len(kept) > 0 {
		h.Set("Connection", strings.Join(kept, ", "))
	}
}
