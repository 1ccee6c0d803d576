package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Defaults of the options.
const (
	// DefaultUserAgent is the User-Agent sent unless WithUserAgent says otherwise.
	DefaultUserAgent = "redlockd-go-client/1"
	// DefaultRequestTimeout bounds one request whose context has no earlier
	// deadline; a waiting acquire's is its wait plus WaitAnswerMargin.
	DefaultRequestTimeout = 10 * time.Second
	// WaitAnswerMargin is how long past its wait (WithWait) a waiting
	// acquire's answer is awaited. The daemon answers a wait_ms acquire
	// when the wait ends, after the attempt under way then: its votes,
	// its fence record and, refused, its clean-up, each bounded by the
	// daemon's per_master_timeout (50 ms by default), so within the wait
	// plus about three per-master timeouts. A daemon that has not answered
	// by then is hung or unreachable; the request timeout (10 s) on top
	// of the wait held the caller that much longer. The smaller of this
	// and WithRequestTimeout applies. A daemon whose per_master_timeout
	// is above about 500 ms can answer later than this near the end of a
	// wait: the acquire then fails with ErrUnavailable, and a lock granted
	// in that moment is released by the daemon (its caller went away).
	WaitAnswerMargin = 2 * time.Second
	// StopAnswerTimeout is how long a stopped wait (WithStopWaiting)
	// awaits the daemon's answer to the stop: a daemon answers it at
	// once; one that does not is hung, and the request is abandoned.
	StopAnswerTimeout = time.Second
	// maxAnswerBytes bounds an answer body; the daemon's are under 2 KiB.
	maxAnswerBytes = 1 << 20
)

// Client calls one redlockd deployment's action API. It is safe for
// concurrent use. Create it with New.
type Client struct {
	endpoint string // base URL + "/v1/lock"
	apiKey   string
	hc       *http.Client
	ua       string
	retry    RetryPolicy
	timeout  time.Duration
}

// RetryPolicy says how a request answered 503 (no quorum of masters) is
// retried. The wait before a retry is the answer's Retry-After (1 s when
// absent), at most MaxDelay, and never past the caller's context: a
// cancelled context ends the retries at once with its error joined.
// Only 503 answers are retried: every action is safe to repeat after one,
// because the daemon took nothing (an acquire answered 503 released on
// every master before answering).
type RetryPolicy struct {
	// Attempts is the number of tries including the first; 0 and 1 both
	// mean no retry.
	Attempts int
	// MaxDelay caps one wait; 0 means no cap beyond Retry-After.
	MaxDelay time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client used for every request. Default: a
// client with http.DefaultTransport and no timeout of its own (each request
// is bounded by its context and by WithRequestTimeout).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithUserAgent sets the User-Agent header. Default DefaultUserAgent.
func WithUserAgent(ua string) Option { return func(c *Client) { c.ua = ua } }

// WithRetry sets the retry policy for 503 answers. Default: no retry.
func WithRetry(p RetryPolicy) Option { return func(c *Client) { c.retry = p } }

// WithRequestTimeout bounds each attempt of a request when the caller's
// context has no earlier deadline; a waiting acquire's (WithWait) is its
// wait plus the smaller of this and WaitAnswerMargin. Default
// DefaultRequestTimeout (10 s); 0 or less means no bound (nor margin).
func WithRequestTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// New returns a Client for the daemon at baseURL (scheme http or https,
// e.g. "http://127.0.0.1:7070"; a path prefix is kept) that sends apiKey in
// the X-API-Key header. It fails with ErrInvalid when baseURL is not an
// absolute http(s) URL, carries a query, or apiKey is empty.
func New(baseURL, apiKey string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	switch {
	case !strings.Contains(baseURL, "://"):
		// "127.0.0.1:7070" does not parse ("first path segment in URL
		// cannot contain colon") and "localhost:7070" parses with scheme
		// "localhost": both mean a missing scheme.
		return nil, fmt.Errorf("%w: base URL %q: no scheme; give http:// or https:// before the host, e.g. http://%s", ErrInvalid, baseURL, strings.TrimLeft(baseURL, "/"))
	case err != nil:
		return nil, fmt.Errorf("%w: base URL: %v", ErrInvalid, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%w: base URL %q: scheme must be http or https", ErrInvalid, baseURL)
	case u.Host == "":
		return nil, fmt.Errorf("%w: base URL %q: missing host", ErrInvalid, baseURL)
	case u.RawQuery != "" || u.User != nil:
		return nil, fmt.Errorf("%w: base URL: must not carry a query or user info (the API key goes in the header)", ErrInvalid)
	case strings.HasSuffix(strings.TrimRight(u.Path, "/"), "/v1/lock") || strings.HasSuffix(strings.TrimRight(u.Path, "/"), "/gateway/distlock"):
		// A path prefix (a reverse proxy's) is fine; the endpoint itself
		// would be appended twice.
		return nil, fmt.Errorf("%w: base URL %q names the endpoint: give the daemon's base URL, without %s", ErrInvalid, baseURL, u.Path)
	case apiKey == "":
		return nil, fmt.Errorf("%w: API key: required", ErrInvalid)
	case strings.ContainsFunc(apiKey, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		// Never sent: net/http would refuse the header at every request,
		// as a transport failure. The key is not repeated.
		return nil, fmt.Errorf("%w: API key: contains a control character (a line ending read from a key file?)", ErrInvalid)
	}
	c := &Client{
		endpoint: strings.TrimRight(u.String(), "/") + "/v1/lock",
		apiKey:   apiKey,
		hc:       &http.Client{},
		ua:       DefaultUserAgent,
		timeout:  DefaultRequestTimeout,
	}
	for _, o := range opts {
		if o != nil { // a nil option is no option, as in the redlock library
			o(c)
		}
	}
	if c.hc == nil {
		c.hc = &http.Client{}
	}
	return c, nil
}

// LockOption modifies one call: WithWait, WithStopWaiting, WithNamespace,
// WithPermits, WithSlot, WithLockDelay, WithKeys.
type LockOption func(*request)

// WithWait makes Acquire wait up to d for a held lock (the daemon retries
// with jitter; wait_ms on the wire, whole milliseconds, at most the
// daemon's max_wait). A wait the daemon ends early because it is
// shutting down (wait_stopped) is sent again for what is left of it, on a
// new connection (acquireWaiting). Ignored by the other calls. Default 0:
// answer at once.
func WithWait(d time.Duration) LockOption { return func(r *request) { r.wait = d } }

// WithStopWaiting lets Acquire stop waiting (WithWait) when stop is
// closed without losing a lock granted meanwhile: the request's
// connection is half-closed (its write side), which the daemon takes as
// the caller leaving — it stops the wait, or releases a lock it granted
// just then (answered 499) — and the answer is still read, for at most
// StopAnswerTimeout (1 s). So Acquire returns either the lock, granted
// before the daemon saw the stop (the caller then owns it, and releases
// it), or an error (the daemon's 499, matching ErrLockHeld: not
// obtained); never a lock held on the masters that the caller cannot
// name. A daemon that does not answer the stop within StopAnswerTimeout
// (hung, stopped) is left: the request's connection is closed and
// Acquire returns an error matching ErrUnavailable; a daemon that runs
// again then sees its caller gone and ends the wait, or releases what it
// grants (a grant it answered in that second and nobody read ends with
// its TTL). Cancelling ctx instead
// drops an answer in flight, and a lock granted in that moment stays held
// until its TTL ends. A request that may be half-closed is not sent on a
// connection that is reused after it. Ignored by the other calls.
func WithStopWaiting(stop <-chan struct{}) LockOption { return func(r *request) { r.stop = stop } }

// WithNamespace selects a sub-space of the API key's account. Default "".
// A Lease remembers it for Extend, Release and Status.
func WithNamespace(ns string) LockOption { return func(r *request) { r.namespace = ns } }

// WithPermits makes Acquire take one of n permits of the semaphore key
// (1 to 1000; permits on the wire) instead of the lock key: at most n
// holders at once, each with its own token, fence and TTL. The Lease
// remembers its slot (Lease.Slot) for Extend and Release. With Status, it
// reads the semaphore: Status.Taken of Status.Permits, and Held when every
// permit is taken. Ignored by Extend and Release. Default 0: a lock.
func WithPermits(n int) LockOption { return func(r *request) { r.permits = n } }

// WithLockDelay makes Acquire ask for a lock-delay of d (whole
// milliseconds, at most 60 s, not negative; lock_delay_ms on the wire): if the lock ends
// without a release, nobody acquires the key for d after it ends. Release
// clears it. Ignored by the other calls. Without it the daemon applies the
// account's default lock_delay (none unless configured); WithLockDelay(0)
// asks for none, also where the account has a default.
func WithLockDelay(d time.Duration) LockOption { return func(r *request) { r.lockDelay = &d } }

// WithSlot makes Extend and Release act on the permit slot of the
// semaphore key (the Lease.Slot its acquire returned). Ignored by Acquire
// and Status. A Lease passes its own.
func WithSlot(slot int) LockOption { return func(r *request) { r.slot = &slot } }

// WithKeys makes the call act on the multi-key lock of keys instead of
// one key: Acquire takes every key or none, under one token and one fence
// (strictly above every earlier holder's of each key); Extend, Release and
// Status act on the same set, in any order. The key argument must then be
// "". The daemon takes 1 to 64 different keys, each as a key argument
// (1–512 bytes); a set of one key is that key's lock. Each key counts
// against the account's max_locks. Cannot be combined with WithPermits or
// WithSlot (the daemon answers 400). A Lease remembers its keys
// (Lease.Keys) for Extend, Release and Status. See docs/api.md
// "Multi-key locks".
//
// Errors: ErrInvalid, without a request, when keys is empty or the key
// argument is not ""; ErrInvalid with the daemon's message naming the
// field (keys[i]) for a duplicate key, more than 64, or a bad key.
func WithKeys(keys ...string) LockOption {
	keys = append([]string(nil), keys...)
	return func(r *request) { r.keys, r.hasKeys = keys, true }
}

// request is one call of the action API.
type request struct {
	action    string
	key       string
	keys      []string // a multi-key lock's keys (WithKeys); key is then ""
	hasKeys   bool     // WithKeys was given, even with no keys
	namespace string
	token     string
	ttl       time.Duration
	wait      time.Duration
	permits   int             // acquire, status: a semaphore's permits; 0 for a lock
	slot      *int            // extend, release: a semaphore's permit slot
	lockDelay *time.Duration  // acquire: WithLockDelay; nil: the account's default
	stop      <-chan struct{} // acquire: WithStopWaiting
	resends   int             // acquire: times sent again after a daemon's shutdown (acquireWaiting)
}

// wireRequest is the JSON body of POST /v1/lock.
type wireRequest struct {
	Action      string   `json:"action"`
	Key         string   `json:"key,omitempty"`
	Keys        []string `json:"keys,omitempty"`
	Namespace   string   `json:"namespace,omitempty"`
	Token       string   `json:"token,omitempty"`
	TTL         int64    `json:"ttl,omitempty"`
	WaitMS      int64    `json:"wait_ms,omitempty"`
	Permits     int      `json:"permits,omitempty"`
	Slot        *int     `json:"slot,omitempty"`
	LockDelayMS *int64   `json:"lock_delay_ms,omitempty"` // nil: the account's default; 0 is sent
}

// envelope is every answer of POST /v1/lock.
type envelope struct {
	Ret  string    `json:"ret"`
	Data *wireData `json:"data"`
	Msg  string    `json:"msg"`
	Code string    `json:"code"`
}

type wireData struct {
	Action     string   `json:"action"`
	Key        string   `json:"key"`
	Keys       []string `json:"keys"` // a multi-key lock's
	Acquired   *bool    `json:"acquired"`
	Released   *bool    `json:"released"`
	Extended   *bool    `json:"extended"`
	Held       *bool    `json:"held"`
	Token      string   `json:"token"`
	TTL        int64    `json:"ttl"`
	ExpireAt   int64    `json:"expire_at"`
	RetryAfter int64    `json:"retry_after"`
	Fence      int64    `json:"fence"`
	ValidityMS *int64   `json:"validity_ms"`
	ElapsedMS  int64    `json:"elapsed_ms"`   // 0 from a daemon that does not send it
	Slot       *int     `json:"slot"`         // a semaphore's acquire
	Taken      int      `json:"taken"`        // a semaphore's status
	NextFreeMS int64    `json:"next_free_ms"` // a semaphore's status
	// WaitStopped: the daemon ended the acquire's wait early because it is
	// shutting down (Acquire sends it again for what is left of the wait).
	WaitStopped bool `json:"wait_stopped"`
}

// answer is a 200 answer with the time its request was sent.
type answer struct {
	data   wireData
	msg    string
	sentAt time.Time // before the request was written
	gotAt  time.Time // after the answer was read
}

// validUntil is the end of the validity the answer reports: validity_ms
// counted from the moment the request was sent plus elapsed_ms, the time
// the daemon spent on it before computing validity_ms (a wait_ms wait,
// retries, the votes). The daemon began after the request was sent, so this
// is never later than the truth; it is earlier by at most the request's
// transit time. Counting from sentAt alone charged the whole wait against
// the validity: a lock won after a 6 s wait counted as lost at once.
//
// An elapsed_ms beyond the round trip (a daemon whose clock stepped, or a
// proxy that answers from elsewhere) is cut to the round trip: the daemon
// cannot have spent longer on the request than it took to answer.
func (a *answer) validUntil() time.Time {
	elapsed := min(max(time.Duration(a.data.ElapsedMS)*time.Millisecond, 0), a.gotAt.Sub(a.sentAt))
	return a.sentAt.Add(elapsed + time.Duration(*a.data.ValidityMS)*time.Millisecond)
}

// ttlSeconds is ttl on the wire: whole seconds, rounded up; below 1s is
// refused (a sub-second lease would be a 1 s one the caller did not ask
// for).
func ttlSeconds(ttl time.Duration) (int64, error) {
	if ttl < time.Second {
		return 0, fmt.Errorf("%w: ttl %v is below the minimum of 1s", ErrInvalid, ttl)
	}
	return ceilSeconds(ttl), nil
}

// ceilSeconds is d in whole seconds, rounded up, for d ≥ 0; it does not
// overflow near the largest Duration (d + 1s − 1 did: a black-box pass sent
// ttl -9223372035 for math.MaxInt64).
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}

// checkKeys refuses, without a request, what the wire cannot say: a
// WithKeys of no keys (sent as no keys field at all) or next to a key.
func (r *request) checkKeys() error {
	switch {
	case !r.hasKeys:
		return nil
	case len(r.keys) == 0:
		return fmt.Errorf("%w: keys: WithKeys needs 1 to 64 keys, got none", ErrInvalid)
	case r.key != "":
		return fmt.Errorf("%w: key, keys: with WithKeys the key argument must be \"\", got %q", ErrInvalid, r.key)
	}
	return nil
}

// mustBeText refuses a string that is not valid UTF-8, naming its field:
// JSON would carry it with U+FFFD in place of the other bytes, which is
// another key (two keys would then name one lock, or one idempotency
// record). The daemon refuses such keys too.
func mustBeText(field, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s: must be valid UTF-8", ErrInvalid, field)
	}
	return nil
}

// do sends r, retrying 503 answers per the policy, and returns a 200
// answer. Errors are *Error, with ctx.Err() joined when the context ended.
func (c *Client) do(ctx context.Context, r *request) (*answer, error) {
	if err := r.checkKeys(); err != nil {
		return nil, err
	}
	if err := mustBeText("key", r.key); err != nil {
		return nil, err
	}
	for i, k := range r.keys {
		if err := mustBeText(fmt.Sprintf("keys[%d]", i), k); err != nil {
			return nil, err
		}
	}
	if err := mustBeText("namespace", r.namespace); err != nil {
		return nil, err
	}
	body := wireRequest{Action: r.action, Key: r.key, Keys: r.keys, Namespace: r.namespace, Token: r.token, WaitMS: r.wait.Milliseconds()}
	switch r.action {
	case "acquire", "status":
		body.Permits = r.permits
		if r.action == "acquire" && r.lockDelay != nil {
			ms := r.lockDelay.Milliseconds()
			body.LockDelayMS = &ms
		}
	case "extend", "release":
		body.Slot = r.slot
	}
	// An acquire or extend always sends its ttl: a zero ttl (an unset
	// field) is refused like 1ms, not sent without one, which the daemon
	// would have answered with its default_ttl.
	if r.ttl != 0 || r.action == "acquire" || r.action == "extend" {
		s, err := ttlSeconds(r.ttl)
		if err != nil {
			return nil, err
		}
		body.TTL = s
	}
	if r.wait < 0 {
		return nil, fmt.Errorf("%w: wait %v is negative", ErrInvalid, r.wait)
	}
	if r.lockDelay != nil && *r.lockDelay < 0 {
		return nil, fmt.Errorf("%w: lock delay %v is negative", ErrInvalid, *r.lockDelay)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	attempts := max(c.retry.Attempts, 1)
	for i := 1; ; i++ {
		a, err := c.once(ctx, r, b)
		if err == nil {
			return a, nil
		}
		var e *Error
		if i >= attempts || ctx.Err() != nil || r.stopped() || !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable {
			return nil, err
		}
		delay := e.RetryAfter
		if delay <= 0 {
			delay = time.Second
		}
		if c.retry.MaxDelay > 0 {
			delay = min(delay, c.retry.MaxDelay)
		}
		switch sleep(ctx, r.stop, delay) { // a nil stop (every call but a stoppable acquire) never ends it
		case ctxEnded:
			return nil, errors.Join(err, ctx.Err())
		case stopped:
			return nil, err
		}
	}
}

// sleepEnd is how a sleep ended.
type sleepEnd int

const (
	slept    sleepEnd = iota // d passed
	ctxEnded                 // ctx ended first
	stopped                  // stop was closed first
)

// sleep waits d, or less when ctx ends or stop closes (a nil stop never
// does), and says which came first. The retries of do, idem,
// acquireWaiting and Release wait with it.
func sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) sleepEnd {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctxEnded
	case <-stop:
		return stopped
	case <-t.C:
		return slept
	}
}

// withCtxErr is e with ctx's error joined in, for errors.Is, unless e
// already carries it (net/http's errors wrap it: joining it again would
// say "context deadline exceeded" twice).
func withCtxErr(e *Error, ctx context.Context) error {
	if errors.Is(e, ctx.Err()) {
		return e
	}
	return errors.Join(e, ctx.Err())
}

// requestTimeout bounds one attempt of r: the client's request timeout,
// or for a waiting acquire its wait plus the smaller of that and
// WaitAnswerMargin (the daemon answers within the wait plus its
// per-master timeouts); 0: no bound.
func (c *Client) requestTimeout(r *request) time.Duration {
	switch {
	case c.timeout <= 0:
		return 0
	case r.action == "acquire" && r.wait > 0:
		return r.wait + min(c.timeout, WaitAnswerMargin)
	}
	return c.timeout
}

// transportErr is a transport failure of a request sent on a context
// derived from caller's: err itself while caller ended (its error then
// matches), else err's text without its chain, so that the client's own
// contexts (the request timeout, a stopped wait's abandon) do not make
// the error match context.Canceled or context.DeadlineExceeded for a
// caller whose context is live (a black-box pass: a stopped wait matched
// context.Canceled with ctx.Err() nil).
func transportErr(caller context.Context, err error) error {
	if caller.Err() == nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return errors.New(err.Error())
	}
	return err
}

// once sends one attempt of r.
func (c *Client) once(ctx context.Context, r *request, body []byte) (*answer, error) {
	caller := ctx
	if d := c.requestTimeout(r); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	waitStops := r.action == "acquire" && r.stop != nil
	var abandon context.CancelFunc // a stopped wait's request nobody answers
	if waitStops {
		if r.stopped() {
			return nil, &Error{Kind: ErrUnavailable, Action: r.action, Msg: "stopped waiting before sending"}
		}
		ctx, abandon = context.WithCancel(ctx)
		defer abandon()
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, &Error{Kind: ErrInvalid, Action: r.action, Msg: err.Error(), Err: err}
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("X-API-Key", c.apiKey)
	hr.Header.Set("User-Agent", c.ua)
	if waitStops {
		done := make(chan struct{})
		defer close(done)
		hr = halfCloseOnStop(hr, r.stop, done, abandon)
	}
	sentAt := time.Now()
	resp, err := c.hc.Do(hr)
	if err != nil {
		e := &Error{Kind: ErrUnavailable, Action: r.action, Msg: err.Error(), Err: transportErr(caller, err)}
		if waitStops && r.stopped() {
			e.Msg = fmt.Sprintf("stopped waiting; the daemon did not answer within %v of the stop (a lock it granted in that moment is released by it once it runs again, or ends with its TTL): %v", StopAnswerTimeout, err)
			return nil, e
		}
		if caller.Err() != nil {
			return nil, withCtxErr(e, caller)
		}
		return nil, e
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		e := &Error{Kind: ErrUnavailable, Action: r.action, Status: resp.StatusCode, Msg: "reading the answer: " + err.Error(), Err: transportErr(caller, err)}
		if caller.Err() != nil {
			return nil, withCtxErr(e, caller)
		}
		return nil, e
	}
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, &Error{Kind: kindOf(resp.StatusCode), Action: r.action, Status: resp.StatusCode,
			Msg: fmt.Sprintf("answer is not the JSON envelope (%s)", shorten(raw)), Err: err}
	}
	if resp.StatusCode != http.StatusOK || env.Ret != "ok" || env.Data == nil {
		e := &Error{Kind: kindOf(resp.StatusCode), Action: r.action, Status: resp.StatusCode, Code: env.Code, Msg: env.Msg}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			e.RetryAfter = time.Duration(s) * time.Second
		}
		if resp.StatusCode == http.StatusOK {
			e.Msg = "answer has ret " + strconv.Quote(env.Ret) + " and no data"
		}
		if e.Code == "cancelled" && r.action == "acquire" && r.stopped() {
			// The daemon ended the wait WithStopWaiting stopped: the
			// lock was not obtained, as the library's WithStopWaiting
			// answers with its last attempt's refusal.
			e.Kind = ErrLockHeld
		}
		return nil, e
	}
	return &answer{data: *env.Data, msg: env.Msg, sentAt: sentAt, gotAt: time.Now()}, nil
}

// stopped reports whether WithStopWaiting's channel is closed.
func (r *request) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// halfCloseOnStop returns hr set to half-close its connection when stop
// is closed before done (WithStopWaiting): the write side only, so that
// the daemon sees the caller leave and the answer can still be read. The
// connection is not reused after it (hr.Close). A connection without
// CloseWrite (neither TCP nor TLS) is closed whole: the caller then gets
// an error, as with a cancelled context. If no answer has come
// StopAnswerTimeout after the stop (a hung daemon, or a connection not
// even set up), abandon (which cancels hr's context) gives up on it: a
// signal to lock run waited out the whole request timeout, 10 s past the
// wait, against a daemon stopped with SIGSTOP.
func halfCloseOnStop(hr *http.Request, stop, done <-chan struct{}, abandon context.CancelFunc) *http.Request {
	conns := make(chan net.Conn, 1)
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		select {
		case conns <- i.Conn:
		default:
		}
	}}
	hr = hr.WithContext(httptrace.WithClientTrace(hr.Context(), trace))
	hr.Close = true
	go func() {
		var conn net.Conn
		select {
		case conn = <-conns:
			select {
			case <-stop:
			case <-done:
				return
			}
		case <-stop:
			// Stopped before a connection was there: nothing to
			// half-close; a connection that comes later gets the request
			// and is abandoned below.
		case <-done:
			return
		}
		t := time.NewTimer(StopAnswerTimeout)
		defer t.Stop()
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else if conn != nil {
			_ = conn.Close()
		}
		select {
		case <-t.C:
			abandon()
		case <-done:
		}
	}()
	return hr
}

// shorten shows at most 64 bytes of an unexpected answer.
func shorten(b []byte) string {
	if len(b) > 64 {
		return strconv.Quote(string(b[:64])) + "…"
	}
	return strconv.Quote(string(b))
}

// Acquire takes the lock key for ttl (whole seconds on the wire, rounded
// up: 1.5s is 2s; at least 1 s — a ttl below 1s, 0 included, is refused
// with ErrInvalid before anything is sent — and at most the daemon's
// max_ttl). With WithWait it
// waits for a held lock; WithNamespace selects a sub-space; with WithKeys
// (and key "") it takes a multi-key lock.
//
// Errors: an *Error matching ErrLockHeld (with RetryAfter) when another
// owner holds the lock, ErrUnavailable, ErrUnauthorized, ErrInvalid.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...LockOption) (*Lease, error) {
	r := request{action: "acquire", key: key, ttl: ttl}
	for _, o := range opts {
		if o != nil { // a nil option is no option, as in the redlock library
			o(&r)
		}
	}
	a, err := c.acquireWaiting(ctx, &r)
	if err != nil {
		return nil, err
	}
	d := &a.data
	if d.Acquired == nil || !*d.Acquired {
		if d.Acquired == nil {
			return nil, &Error{Action: r.action, Status: http.StatusOK, Msg: "answer lacks data.acquired"}
		}
		return nil, &Error{Kind: ErrLockHeld, Action: r.action, Status: http.StatusOK, Msg: a.msg,
			RetryAfter: time.Duration(d.RetryAfter) * time.Second}
	}
	if r.hasKeys && len(r.keys) > 1 && len(d.Keys) != len(r.keys) {
		// A daemon without multi-key locks would not get here (it refuses
		// the keys field), but one that took a single key must not pass
		// for holding the set.
		return nil, &Error{Action: r.action, Status: http.StatusOK, Msg: "answer lacks data.keys (a daemon without multi-key locks)"}
	}
	if d.Token == "" || d.ValidityMS == nil {
		return nil, &Error{Action: r.action, Status: http.StatusOK, Msg: "answer lacks data.token or data.validity_ms"}
	}
	if r.permits > 0 && d.Slot == nil {
		return nil, &Error{Action: r.action, Status: http.StatusOK, Msg: "answer lacks data.slot (a daemon without semaphores)"}
	}
	if r.hasKeys {
		key = r.keys[0]
	}
	l := newLease(c, key, r.namespace, d.Token, d.Fence, time.Duration(d.TTL)*time.Second, a.validUntil())
	if r.hasKeys {
		l.keys = r.keys
	}
	if r.permits > 0 {
		l.slot, l.permits = d.Slot, r.permits
	}
	return l, nil
}

// redialDelay is how long a waiting acquire resent after a daemon's
// shutdown (acquireWaiting) waits before it tries again when no daemon
// answered.
const redialDelay = 100 * time.Millisecond

// acquireWaiting sends the acquire r and, while r waits (WithWait), sends
// it again for what is left of the wait when the daemon answered that it
// ended the wait because it is shutting down (wait_stopped): a rolling
// restart or a scale-down must not turn a caller's wait into "held". The
// wait ends when it would have without the shutdown: counted from before
// the first request was sent. The daemon's answer closed the connection
// (Connection: close), so the next request goes over a new one — to
// another replica behind a load balancer, or to the daemon that replaces
// this one.
//
// While a request gets no answer at all (the connection refused: no daemon
// listens yet, or between a restart's two processes; or reset: a daemon
// that was closing as it connected, or one killed with the request in
// hand), it tries again every redialDelay until the wait ends, then
// returns that failure (ErrUnavailable). A request that did reach a daemon and lost its answer
// cannot leave two holders: a lock granted to a caller that went away is
// released by the daemon, or at worst stands, known to nobody, until its
// TTL — and the next resend waits for it like any holder's. An HTTP
// error answer (400, 401, 429, a 503 past the retry policy) ends it. The
// caller's stop (WithStopWaiting) and ctx end it as they end a wait.
func (c *Client) acquireWaiting(ctx context.Context, r *request) (*answer, error) {
	ends := time.Now().Add(r.wait)
	a, err := c.do(ctx, r)
	if r.wait <= 0 {
		return a, err
	}
	for {
		var pause time.Duration
		switch {
		case err == nil && a.data.WaitStopped && (a.data.Acquired == nil || !*a.data.Acquired):
			// A daemon that stopped its waits a moment before this request
			// reached it answers at once: resend no more often than
			// redialDelay, never in a busy loop.
			pause = redialDelay - time.Since(a.sentAt)
		case err != nil && a == nil && noAnswer(err):
			// No daemon answered, the first request or a resend: none
			// listening yet (started before the daemon, or between two),
			// or one that died with the request in hand.
			pause = redialDelay
		default:
			return a, err
		}
		if pause = min(pause, time.Until(ends)); pause > 0 {
			switch sleep(ctx, r.stop, pause) {
			case ctxEnded:
				return a, errors.Join(err, ctx.Err())
			case stopped:
				return a, err
			}
		}
		left := time.Until(ends).Truncate(time.Millisecond)
		if left <= 0 || r.stopped() || ctx.Err() != nil {
			return a, err
		}
		r.wait, r.resends = left, r.resends+1
		a, err = c.do(ctx, r)
	}
}

// dialFailed reports whether err is a request that never reached a
// daemon: its connection could not be set up, so nothing was sent.
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// noAnswer reports whether err is a request that got no HTTP answer: a
// connection refused, reset or timed out (an *Error without a status).
func noAnswer(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == 0 && errors.Is(e.Kind, ErrUnavailable)
}

// Extend resets the TTL of the lock key held by token to ttl and returns
// the lock's new validity as a Lease (without a keep-alive); its TTL is
// what the daemon reports, never below the time that was left (an extend
// never shortens a lock). Use Lease.Extend on a Lease you hold.
//
// Errors: an *Error matching ErrNotHeld when the token does not hold the
// lock, ErrUnavailable, ErrUnauthorized, ErrInvalid.
func (c *Client) Extend(ctx context.Context, key, token string, ttl time.Duration, opts ...LockOption) (*Lease, error) {
	r := request{action: "extend", key: key, token: token, ttl: ttl}
	for _, o := range opts {
		if o != nil { // a nil option is no option, as in the redlock library
			o(&r)
		}
	}
	e, err := c.extend(ctx, &r)
	if err != nil {
		return nil, err
	}
	if r.hasKeys {
		key = r.keys[0]
	}
	l := newLease(c, key, r.namespace, token, e.fence, e.ttl, e.validUntil)
	if r.hasKeys {
		l.keys = r.keys
	}
	return l, nil
}

// extended is a successful extend's answer.
type extended struct {
	validUntil time.Time
	ttl        time.Duration // how long the lock lasts, as the daemon says: never below what was left
	fence      int64         // 0 when the daemon does not report it
}

func (c *Client) extend(ctx context.Context, r *request) (extended, error) {
	a, err := c.do(ctx, r)
	if err != nil {
		return extended{}, err
	}
	d := &a.data
	switch {
	case d.Extended == nil:
		return extended{}, &Error{Action: r.action, Status: http.StatusOK, Msg: "answer lacks data.extended"}
	case !*d.Extended:
		return extended{}, &Error{Kind: ErrNotHeld, Action: r.action, Status: http.StatusOK, Msg: a.msg}
	case d.ValidityMS == nil:
		return extended{}, &Error{Action: r.action, Status: http.StatusOK, Msg: "answer lacks data.validity_ms"}
	}
	e := extended{validUntil: a.validUntil(), ttl: r.ttl, fence: d.Fence}
	if d.TTL > 0 {
		e.ttl = time.Duration(d.TTL) * time.Second
	}
	return e, nil
}

// Release releases the lock key held by token. When ctx has a deadline,
// a release whose connection is refused (no daemon listening: nothing was
// sent) is tried again every 100 ms until the deadline, so that one made
// while the daemon restarts reaches its replacement instead of leaving the
// lock to its TTL; without a deadline it is tried once. Errors: an *Error
// matching ErrNotHeld when the token did not hold it (expired, released
// twice, another owner), ErrUnavailable, ErrUnauthorized, ErrInvalid.
func (c *Client) Release(ctx context.Context, key, token string, opts ...LockOption) error {
	r := request{action: "release", key: key, token: token}
	for _, o := range opts {
		if o != nil { // a nil option is no option, as in the redlock library
			o(&r)
		}
	}
	a, err := c.do(ctx, &r)
	for err != nil && dialFailed(err) {
		deadline, ok := ctx.Deadline()
		if !ok || time.Until(deadline) <= redialDelay {
			return err
		}
		if sleep(ctx, nil, redialDelay) != slept {
			return errors.Join(err, ctx.Err())
		}
		a, err = c.do(ctx, &r)
	}
	if err != nil {
		return err
	}
	switch d := &a.data; {
	case d.Released == nil:
		return &Error{Action: r.action, Status: http.StatusOK, Msg: "answer lacks data.released"}
	case !*d.Released:
		return &Error{Kind: ErrNotHeld, Action: r.action, Status: http.StatusOK, Msg: a.msg}
	}
	return nil
}

// Status is a majority read of one lock key. The token is never revealed.
type Status struct {
	// Held is true when a quorum of masters hold the same token, or, where
	// no token can be on a quorum, any master that answered holds a token
	// with its fence record (a granted lock whose key was lost elsewhere:
	// every acquire refuses it).
	Held bool
	// Validity is the holder's conservative remaining time; 0 when not
	// held, and for a semaphore (see NextFree).
	Validity time.Duration
	// ValidUntil is when that validity ends: validity_ms counted from
	// before the request was sent plus the daemon's elapsed_ms, never later
	// than the truth; zero when not held.
	ValidUntil time.Time
	// Fence is the holder's fencing token (the one its acquire returned),
	// for checking a resource's fencing column; 0 when not held or when
	// the daemon does not report it (the holder's acquire has not finished,
	// or an older daemon). The holder's token is never revealed.
	Fence int64
	// Permits, Taken and NextFree answer a semaphore's status
	// (WithPermits): Taken of Permits are held, Held is Taken == Permits,
	// and NextFree is the shortest validity among the holders (0 when none
	// is taken). Zero for a lock.
	Permits, Taken int
	NextFree       time.Duration
}

// Status reads whether the lock key is held, by anyone; with WithKeys,
// whether one token holds every key of the set (Validity the shortest of
// the keys'). Errors: ErrUnavailable, ErrUnauthorized, ErrInvalid.
func (c *Client) Status(ctx context.Context, key string, opts ...LockOption) (Status, error) {
	r := request{action: "status", key: key}
	for _, o := range opts {
		if o != nil { // a nil option is no option, as in the redlock library
			o(&r)
		}
	}
	a, err := c.do(ctx, &r)
	if err != nil {
		return Status{}, err
	}
	d := &a.data
	if d.Held == nil {
		return Status{}, &Error{Action: r.action, Status: http.StatusOK, Msg: "answer lacks data.held"}
	}
	st := Status{Held: *d.Held}
	if r.permits > 0 {
		st.Permits, st.Taken = r.permits, d.Taken
		st.NextFree = time.Duration(d.NextFreeMS) * time.Millisecond
		return st, nil
	}
	if st.Held && d.ValidityMS != nil {
		st.ValidUntil = a.validUntil()
		st.Validity = max(time.Until(st.ValidUntil), 0)
	}
	if st.Held {
		st.Fence = d.Fence
	}
	return st, nil
}
