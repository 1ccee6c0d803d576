package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Errors of the idempotency actions, matched with errors.Is on an *Error.
var (
	// ErrInProgress: another attempt of the key holds its processing
	// lease (HTTP 409 in_progress); the *Error's RetryAfter says when to
	// try again.
	ErrInProgress = errors.New("redlockd: idempotency key in progress")
	// ErrFingerprintMismatch: the key was used with another request
	// (HTTP 422): use a new key for a new request.
	ErrFingerprintMismatch = errors.New("redlockd: idempotency key used with another request")
	// ErrNotOwner: the token's attempt no longer owns the record (HTTP 409
	// not_owner): its lease ended and a later attempt began or completed.
	ErrNotOwner = errors.New("redlockd: idempotency token does not own the record")
	// ErrAlreadyCompleted: a second Complete of an attempt with another
	// answer (HTTP 409 already_completed); the first answer is kept.
	ErrAlreadyCompleted = errors.New("redlockd: idempotency attempt already completed with another answer")
)

// Answer is a response stored by Complete and replayed to every later
// Begin of the key, byte for byte.
type Answer struct {
	Status  int               // HTTP status code, 100 to 599
	Headers map[string]string // a few headers worth replaying
	Body    []byte
}

// Attempt is an attempt Begin started: execute it, passing Fence to the
// store so that it refuses writes of earlier attempts.
type Attempt struct {
	Key, Namespace string
	// Token proves ownership for Complete, Abort and ExtendAttempt; a
	// secret.
	Token string
	Fence int64
	// Attempts counts the attempts begun, this one included.
	Attempts int64
	// Takeover: an earlier attempt's lease ended without complete
	// (expired_in_progress). It may have done its work: reconcile with
	// the store (find the work by its unique key) before doing it again.
	Takeover bool
	// PreviousFence is the earlier attempt's fence when Takeover.
	PreviousFence int64
	// ValidUntil is the end of the lease's validity, never later than
	// the truth (counted from before the request was sent).
	ValidUntil time.Time
}

// BeginResult is Begin's answer: exactly one of Attempt (run the work)
// and Replay (the stored answer) is set.
type BeginResult struct {
	Attempt *Attempt
	Replay  *Answer
}

// IdemOption configures an idempotency call.
type IdemOption func(*idemRequest)

// WithIdemNamespace scopes the key to a namespace of the API key's
// account (for example the end user's id). Default: none.
func WithIdemNamespace(ns string) IdemOption { return func(r *idemRequest) { r.Namespace = ns } }

// WithLease sets the processing lease, whole seconds rounded up. Default:
// the daemon's (30 s).
func WithLease(d time.Duration) IdemOption {
	return func(r *idemRequest) { r.Lease = ceilSeconds(d) }
}

// WithRetention sets how long the record is kept, whole seconds rounded
// up, at most 7 days. Default: the daemon's (24 h).
func WithRetention(d time.Duration) IdemOption {
	return func(r *idemRequest) { r.Retention = ceilSeconds(d) }
}

// Fingerprint is the canonical fingerprint of a request body: the
// lowercase hex SHA-256 of its exact bytes, as the daemon computes it
// from a body it is given (docs/idempotency.md).
func Fingerprint(body []byte) string {
	h := sha256.Sum256(body)
	return hex.EncodeToString(h[:])
}

type idemRequest struct {
	Action      string      `json:"action"`
	Key         string      `json:"key"`
	Namespace   string      `json:"namespace,omitempty"`
	Fingerprint string      `json:"fingerprint,omitempty"`
	Lease       int64       `json:"lease,omitempty"`
	Retention   int64       `json:"retention,omitempty"`
	Token       string      `json:"token,omitempty"`
	Answer      *wireAnswer `json:"answer,omitempty"`
}

type wireAnswer struct {
	Status     int               `json:"status"`
	Headers    map[string]string `json:"headers,omitempty"`
	BodyBase64 string            `json:"body_base64"`
}

type idemEnvelope struct {
	Ret  string    `json:"ret"`
	Data *idemData `json:"data"`
	Msg  string    `json:"msg"`
	Code string    `json:"code"`
}

type idemData struct {
	Outcome       string      `json:"outcome"`
	Token         string      `json:"token"`
	Fence         int64       `json:"fence"`
	PreviousFence int64       `json:"previous_fence"`
	Attempts      int64       `json:"attempts"`
	ValidityMS    *int64      `json:"validity_ms"`
	RetryAfter    int64       `json:"retry_after"`
	Answer        *wireAnswer `json:"answer"`
}

// Begin begins an attempt of key, whose request has fingerprint (64
// lowercase hex characters; see Fingerprint). Errors are *Error: ErrInProgress
// (with RetryAfter), ErrFingerprintMismatch, ErrInvalid, ErrUnavailable.
func (c *Client) Begin(ctx context.Context, key, fingerprint string, opts ...IdemOption) (BeginResult, error) {
	r := idemRequest{Action: "idem_begin", Key: key, Fingerprint: fingerprint}
	for _, o := range opts {
		if o != nil { // a nil option is no option, as in the redlock library
			o(&r)
		}
	}
	sentAt := time.Now()
	d, err := c.idem(ctx, &r)
	if err != nil {
		return BeginResult{}, err
	}
	switch d.Outcome {
	case "started", "expired_in_progress":
		a := &Attempt{Key: key, Namespace: r.Namespace, Token: d.Token, Fence: d.Fence, Attempts: d.Attempts,
			Takeover: d.Outcome == "expired_in_progress", PreviousFence: d.PreviousFence}
		if d.ValidityMS != nil {
			a.ValidUntil = sentAt.Add(time.Duration(*d.ValidityMS) * time.Millisecond)
		}
		return BeginResult{Attempt: a}, nil
	case "completed":
		ans, err := d.Answer.decode()
		if err != nil {
			return BeginResult{}, &Error{Action: r.Action, Status: http.StatusOK, Msg: "stored answer: " + err.Error(), Err: err}
		}
		return BeginResult{Replay: ans}, nil
	}
	return BeginResult{}, &Error{Action: r.Action, Status: http.StatusOK, Msg: "unknown outcome " + strconv.Quote(d.Outcome)}
}

func (w *wireAnswer) decode() (*Answer, error) {
	if w == nil {
		return nil, errors.New("missing")
	}
	b, err := base64.StdEncoding.DecodeString(w.BodyBase64)
	if err != nil {
		return nil, err
	}
	return &Answer{Status: w.Status, Headers: w.Headers, Body: b}, nil
}

// Complete stores answer as the record's answer and ends the attempt's
// lease. Errors are *Error: ErrNotOwner, ErrInvalid (also 413, an answer
// above the daemon's cap), ErrUnavailable.
func (c *Client) Complete(ctx context.Context, a *Attempt, answer Answer) error {
	if a == nil {
		return fmt.Errorf("%w: Complete of a nil Attempt", ErrInvalid)
	}
	r := idemRequest{Action: "idem_complete", Key: a.Key, Namespace: a.Namespace, Token: a.Token,
		Answer: &wireAnswer{Status: answer.Status, Headers: answer.Headers, BodyBase64: base64.StdEncoding.EncodeToString(answer.Body)}}
	_, err := c.idem(ctx, &r)
	return err
}

// Abort ends the attempt without an answer: the next Begin starts afresh.
// For a failure that must not be retried, Complete with its answer instead.
func (c *Client) Abort(ctx context.Context, a *Attempt) error {
	if a == nil {
		return fmt.Errorf("%w: Abort of a nil Attempt", ErrInvalid)
	}
	r := idemRequest{Action: "idem_abort", Key: a.Key, Namespace: a.Namespace, Token: a.Token}
	_, err := c.idem(ctx, &r)
	return err
}

// ExtendAttempt makes the attempt's lease last d more from now.
func (c *Client) ExtendAttempt(ctx context.Context, a *Attempt, d time.Duration) error {
	if a == nil {
		return fmt.Errorf("%w: ExtendAttempt of a nil Attempt", ErrInvalid)
	}
	r := idemRequest{Action: "idem_extend", Key: a.Key, Namespace: a.Namespace, Token: a.Token}
	WithLease(d)(&r)
	sentAt := time.Now()
	data, err := c.idem(ctx, &r)
	if err == nil && data.ValidityMS != nil {
		a.ValidUntil = sentAt.Add(time.Duration(*data.ValidityMS) * time.Millisecond)
	}
	return err
}

// Idempotent runs fn at most once for key while its record is retained,
// and returns fn's answer, or the answer stored by the attempt that ran
// (replayed, fn not called). fn gets the attempt: pass its Fence to the
// store, and when Takeover is set, look for the earlier attempt's work
// first. While fn runs, the lease is extended at half its length; fn's
// context ends if an extension fails with ErrNotOwner, or fails at all
// once the lease's validity is over. When fn returns an
// error, the attempt is aborted (a later call runs fn again) and the error
// returned; to store a failure instead, return it as an Answer (a 4xx).
// When fn panics, the attempt is aborted too and the panic goes on (as
// WithLock releases its lock): the key is not left in progress for the
// whole lease. A goroutine that ends by runtime.Goexit in fn leaves it in
// progress, as a process that died does.
//
// Errors: those of Begin (ErrInProgress with RetryAfter,
// ErrFingerprintMismatch, …), fn's, and those of Complete.
func (c *Client) Idempotent(ctx context.Context, key, fingerprint string, fn func(ctx context.Context, a Attempt) (Answer, error), opts ...IdemOption) (Answer, error) {
	res, err := c.Begin(ctx, key, fingerprint, opts...)
	if err != nil {
		return Answer{}, err
	}
	if res.Replay != nil {
		return *res.Replay, nil
	}
	a := res.Attempt
	lease := leaseOf(opts)
	work, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := c.keepAttempt(work, func(error) { cancel() }, a, lease)
	abort := func() error {
		actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer acancel()
		return c.Abort(actx, a)
	}
	returned := false
	defer func() {
		if returned {
			return
		}
		// Only a panic aborts: a goroutine ended by runtime.Goexit (how the
		// examples stand in for a process that died mid-work) leaves the
		// attempt in progress, as a dead process's is, for a take-over
		// after its lease.
		if v := recover(); v != nil {
			stop()
			_ = abort()
			panic(v)
		}
	}()
	ans, ferr := fn(work, *a)
	returned = true
	stop()
	if ferr != nil {
		return Answer{}, errors.Join(ferr, abort())
	}
	if err := c.Complete(ctx, a, ans); err != nil {
		return Answer{}, err
	}
	return ans, nil
}

// keepAttempt extends a's lease by lease at half its length until stop is
// called or ctx ends (stop waits for the extender to end; calling it
// again is a no-op); an extension answered ErrNotOwner (the lease ended
// or the attempt was taken over), or one that failed once the lease's
// validity was over, is passed to lost, once, and ends the extending.
func (c *Client) keepAttempt(ctx context.Context, lost func(error), a *Attempt, lease time.Duration) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(max(lease/2, 500*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				err := c.ExtendAttempt(ctx, a, lease)
				switch {
				case errors.Is(err, ErrNotOwner):
					lost(err)
					return
				case err != nil && !time.Now().Before(a.ValidUntil):
					// Not extended in time (the daemon or a quorum of
					// masters out of reach): the lease is over, whether or
					// not the daemon can say so yet.
					lost(fmt.Errorf("not extended before the lease's validity ended: %w", err))
					return
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-exited
	}
}

// leaseOf is the lease opts ask for, or the daemon's default (30 s).
func leaseOf(opts []IdemOption) time.Duration {
	var r idemRequest
	for _, o := range opts {
		if o != nil { // a nil option is no option, as in the redlock library
			o(&r)
		}
	}
	if r.Lease > 0 {
		return time.Duration(r.Lease) * time.Second
	}
	return 30 * time.Second
}

// idem sends one idempotency action, retrying 503 answers per the policy.
func (c *Client) idem(ctx context.Context, r *idemRequest) (*idemData, error) {
	if err := mustBeText("key", r.Key); err != nil {
		return nil, err
	}
	if err := mustBeText("namespace", r.Namespace); err != nil {
		return nil, err
	}
	body, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	attempts := max(c.retry.Attempts, 1)
	for i := 1; ; i++ {
		d, err := c.idemOnce(ctx, r.Action, body)
		if err == nil {
			return d, nil
		}
		var e *Error
		if i >= attempts || ctx.Err() != nil || !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable {
			return nil, err
		}
		delay := max(e.RetryAfter, time.Second)
		if c.retry.MaxDelay > 0 {
			delay = min(delay, c.retry.MaxDelay)
		}
		if sleep(ctx, nil, delay) != slept {
			return nil, errors.Join(err, ctx.Err())
		}
	}
}

func (c *Client) idemOnce(ctx context.Context, action string, body []byte) (*idemData, error) {
	caller := ctx
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, &Error{Kind: ErrInvalid, Action: action, Msg: err.Error(), Err: err}
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("X-API-Key", c.apiKey)
	hr.Header.Set("User-Agent", c.ua)
	resp, err := c.hc.Do(hr)
	if err != nil {
		// The request timeout is the client's, not the caller's: only the
		// caller's own context error matches (transportErr).
		e := &Error{Kind: ErrUnavailable, Action: action, Msg: err.Error(), Err: transportErr(caller, err)}
		if caller.Err() != nil {
			return nil, withCtxErr(e, caller)
		}
		return nil, e
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return nil, &Error{Kind: ErrUnavailable, Action: action, Status: resp.StatusCode, Msg: "reading the answer: " + err.Error(), Err: transportErr(caller, err)}
	}
	var env idemEnvelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, &Error{Kind: kindOf(resp.StatusCode), Action: action, Status: resp.StatusCode,
			Msg: fmt.Sprintf("answer is not the JSON envelope (%s)", shorten(raw)), Err: err}
	}
	if resp.StatusCode == http.StatusOK && env.Ret == "ok" && env.Data != nil {
		return env.Data, nil
	}
	e := &Error{Kind: kindOf(resp.StatusCode), Action: action, Status: resp.StatusCode, Code: env.Code, Msg: env.Msg}
	switch env.Code {
	case "in_progress":
		e.Kind = ErrInProgress
	case "fingerprint_mismatch":
		e.Kind = ErrFingerprintMismatch
	case "not_owner":
		e.Kind = ErrNotOwner
	case "already_completed":
		e.Kind = ErrAlreadyCompleted
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return nil, e
}
