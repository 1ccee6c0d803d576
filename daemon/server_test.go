package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/redlockd/redlockd/redlock"
)

// API keys of the two test accounts.
const (
	testKeyAcme   = "acme-key-0123456789abcdef"
	testKeyGlobex = "globex-key-0123456789abcdef"
	testPrefix    = "test:"
)

// testServer is a Server listening on a real loopback port.
type testServer struct {
	URL     string // http://127.0.0.1:port
	Server  *Server
	Options *Options
	Reg     *prometheus.Registry
	Logs    *observer.ObservedLogs
	client  *http.Client
}

// newTestServer starts a Server over locker on 127.0.0.1:0 with two
// accounts (testKeyAcme → "acme", testKeyGlobex → "globex"), KeyPrefix
// testPrefix, MaxWait 2s and MaxBodyBytes 4096, every log line captured.
// opts may change the Options before New. The server is shut down, and its
// Serve error checked, when the test ends. locker may be a real
// NewRedlockLocker(client).
func newTestServer(t *testing.T, locker MasterLocker, opts ...func(*Options)) *testServer {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	reg := prometheus.NewRegistry()
	o := &Options{
		APIKeys: []APIKey{
			{Account: "acme", Hash: sha256.Sum256([]byte(testKeyAcme))},
			{Account: "globex", Hash: sha256.Sum256([]byte(testKeyGlobex))},
		},
		KeyPrefix:       testPrefix,
		MaxWait:         2 * time.Second,
		MaxBodyBytes:    4096,
		ShutdownTimeout: 5 * time.Second,
		Locker:          locker,
		Health:          locker,
		Metrics:         NewMetrics(reg),
	}
	for _, f := range opts {
		f(o)
	}
	s, err := New(zap.New(core), o)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	tr := &http.Transport{}
	ts := &testServer{
		URL:     "http://" + ln.Addr().String(),
		Server:  s,
		Options: o,
		Reg:     reg,
		Logs:    logs,
		client:  &http.Client{Transport: tr, Timeout: 30 * time.Second},
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err, "Serve")
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after its context was cancelled")
		}
		tr.CloseIdleConnections()
	})
	return ts
}

// response is one HTTP answer with its envelope decoded.
type response struct {
	Status int
	Header http.Header
	Raw    string
	Env    envelope
}

type envelope struct {
	Ret         string          `json:"ret"`
	Data        json.RawMessage `json:"data"`
	Msg         string          `json:"msg"`
	Code        *string         `json:"code"`
	RemainQuota *int            `json:"remain_quota"`
}

// data decodes the envelope's data into a map, so tests can tell an absent
// field from a zero one.
func (r *response) data(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.Env.Data, &m), "data in %s", r.Raw)
	return m
}

func (r *response) code() string {
	if r.Env.Code == nil {
		return ""
	}
	return *r.Env.Code
}

// lock POSTs body to /v1/lock with apiKey as JSON.
func (ts *testServer) lock(t *testing.T, apiKey, body string) *response {
	t.Helper()
	return ts.do(t, http.MethodPost, "/v1/lock", body, map[string]string{"X-API-Key": apiKey, "Content-Type": "application/json"})
}

// do sends one request; a header with an empty value is not sent.
func (ts *testServer) do(t *testing.T, method, path, body string, header map[string]string) *response {
	t.Helper()
	return ts.doCtx(t, context.Background(), method, path, strings.NewReader(body), header)
}

func (ts *testServer) doCtx(t *testing.T, ctx context.Context, method, path string, body io.Reader, header map[string]string) *response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, ts.URL+path, body)
	require.NoError(t, err)
	for k, v := range header {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := ts.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	r := &response{Status: resp.StatusCode, Header: resp.Header, Raw: string(raw)}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		require.NoError(t, json.Unmarshal(raw, &r.Env), "body %q", raw)
	}
	return r
}

// fakeLocker is an in-memory Locker with the semantics of redlock on five
// healthy masters: the daemon's own seam, not a Redis mock. Every key it
// is given is recorded.
type fakeLocker struct {
	mu    sync.Mutex
	locks map[string]fakeLock
	keys  []string // every key of every call, in order
	waits []time.Duration
	up    [5]bool
	extra [5]redlock.MasterStatus // quarantine, clock, warnings… per master

	repairs, quarantines atomic.Int64

	down      atomic.Bool   // every call fails with ErrQuorumUnavailable
	block     chan struct{} // when set, Acquire waits for it or ctx
	blocked   chan struct{} // when set, receives once Acquire blocks
	cancelled atomic.Int32  // calls that returned because ctx ended
	panicKey  string        // Acquire of a key ending in this panics
	failKey   string        // Acquire of a key ending in this returns an unexpected error
	calls     atomic.Int32
}

type fakeLock struct {
	token string
	until time.Time
}

func newFakeLocker() *fakeLocker {
	f := &fakeLocker{locks: map[string]fakeLock{}}
	for i := range f.up {
		f.up[i] = true
	}
	return f
}

func (f *fakeLocker) record(key string) {
	f.calls.Add(1)
	f.mu.Lock()
	f.keys = append(f.keys, key)
	f.mu.Unlock()
}

func (f *fakeLocker) seenKeys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.keys...)
}

func (f *fakeLocker) outcome(op string, kind error) *redlock.OutcomeError {
	oe := &redlock.OutcomeError{Op: op, Kind: kind, Quorum: 3, Masters: 5}
	if kind != redlock.ErrQuorumUnavailable {
		return oe
	}
	// The masters that do not count fail as redlock reports them.
	for _, st := range f.Masters() {
		switch st.State {
		case redlock.MasterDown:
			oe.Failures = append(oe.Failures, &redlock.MasterError{Index: st.Index, Addr: st.Addr, Err: redlock.ErrMasterDown})
		case redlock.MasterQuarantined:
			oe.Failures = append(oe.Failures, &redlock.MasterError{Index: st.Index, Addr: st.Addr, Err: redlock.ErrMasterQuarantined})
		}
	}
	return oe
}

var fakeTokens atomic.Uint64

func (f *fakeLocker) Acquire(ctx context.Context, req AcquireRequest) (Lease, error) {
	if req.Permits > 0 {
		// One attempt per slot, as redlock does (without its wait queue).
		var err error
		for slot := range req.Permits {
			r := req
			r.Key, r.Permits, r.Wait = redlock.PermitKey(req.Key, slot), 0, 0
			var l Lease
			if l, err = f.Acquire(ctx, r); err == nil {
				l.Slot = slot
				return l, nil
			}
		}
		return Lease{}, err
	}
	key, ttl, wait := req.Key, req.TTL, req.Wait
	f.record(key)
	f.mu.Lock()
	f.waits = append(f.waits, wait)
	f.mu.Unlock()
	if f.panicKey != "" && strings.HasSuffix(key, f.panicKey) {
		panic("fake panic for " + key)
	}
	if f.failKey != "" && strings.HasSuffix(key, f.failKey) {
		return Lease{}, errors.New("something unexpected")
	}
	if f.down.Load() {
		return Lease{}, f.outcome("acquire", redlock.ErrQuorumUnavailable)
	}
	if f.block != nil {
		if f.blocked != nil {
			f.blocked <- struct{}{}
		}
		select {
		case <-f.block:
		case <-ctx.Done():
			f.cancelled.Add(1)
			return Lease{}, errors.Join(redlock.ErrNotObtained, ctx.Err())
		}
	}
	giveUp := time.Now().Add(wait)
	for {
		f.mu.Lock()
		now := time.Now()
		l, held := f.locks[key]
		if !held || now.After(l.until) {
			tok := fmt.Sprintf("%032x", fakeTokens.Add(1)<<40|uint64(now.UnixNano()&0xffffffffff))
			nl := fakeLock{token: tok, until: now.Add(ttl - ttl/100 - 2*time.Millisecond)}
			f.locks[key] = nl
			f.mu.Unlock()
			return Lease{Token: tok, ValidUntil: nl.until}, nil
		}
		f.mu.Unlock()
		if time.Now().After(giveUp) {
			e := f.outcome("acquire", redlock.ErrLockHeld)
			e.Refused, e.RetryAfter = 5, time.Until(l.until)
			return Lease{}, e
		}
		select {
		case <-ctx.Done():
			f.cancelled.Add(1)
			return Lease{}, errors.Join(redlock.ErrNotObtained, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// holder returns the live lock on key, if any; the caller holds f.mu.
func (f *fakeLocker) holder(key string) (fakeLock, bool) {
	l, ok := f.locks[key]
	if !ok || time.Now().After(l.until) {
		delete(f.locks, key)
		return fakeLock{}, false
	}
	return l, true
}

// errFakeMulti: the fake has no multi-key locks; they are tested on real
// masters (multikey_test.go).
var errFakeMulti = errors.New("fakeLocker: multi-key locks are tested on real masters")

func (f *fakeLocker) ReleaseMulti(context.Context, []string, string) (int, error) {
	return 0, errFakeMulti
}

func (f *fakeLocker) ExtendMulti(context.Context, []string, string, time.Duration) (Lease, error) {
	return Lease{}, errFakeMulti
}

func (f *fakeLocker) StatusMulti(context.Context, []string) (redlock.MultiStatus, error) {
	return redlock.MultiStatus{}, errFakeMulti
}

func (f *fakeLocker) Release(ctx context.Context, key, token string) (int, error) {
	f.record(key)
	if f.down.Load() {
		return 0, f.outcome("release", redlock.ErrQuorumUnavailable)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.holder(key)
	switch {
	case !ok:
		e := f.outcome("release", redlock.ErrNotHeld)
		e.Refused, e.Absent = 5, 5
		return 0, e
	case l.token != token:
		e := f.outcome("release", redlock.ErrNotHeld)
		e.Refused, e.Foreign = 5, 5
		return 0, e
	}
	delete(f.locks, key)
	return 5, nil
}

func (f *fakeLocker) Extend(ctx context.Context, key, token string, ttl time.Duration) (Lease, error) {
	f.record(key)
	if f.down.Load() {
		return Lease{}, f.outcome("extend", redlock.ErrQuorumUnavailable)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.holder(key)
	switch {
	case !ok:
		e := f.outcome("extend", redlock.ErrNotHeld)
		e.Refused, e.Absent = 5, 5
		return Lease{}, e
	case l.token != token:
		e := f.outcome("extend", redlock.ErrNotHeld)
		e.Refused, e.Foreign = 5, 5
		return Lease{}, e
	}
	l.until = time.Now().Add(ttl - ttl/100 - 2*time.Millisecond)
	f.locks[key] = l
	return Lease{Token: token, ValidUntil: l.until}, nil
}

func (f *fakeLocker) Status(ctx context.Context, key string) (redlock.Status, error) {
	f.record(key)
	if f.down.Load() {
		return redlock.Status{}, f.outcome("status", redlock.ErrQuorumUnavailable)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.holder(key)
	if !ok {
		return redlock.Status{Answered: 5}, nil
	}
	return redlock.Status{Held: true, Holders: 5, Answered: 5, Validity: time.Until(l.until)}, nil
}

func (f *fakeLocker) SemaphoreStatus(ctx context.Context, key string, permits int) (redlock.SemaphoreStatus, error) {
	out := redlock.SemaphoreStatus{Permits: permits}
	for slot := range permits {
		st, err := f.Status(ctx, redlock.PermitKey(key, slot))
		if err != nil {
			return redlock.SemaphoreStatus{}, err
		}
		if st.Held {
			out.Taken++
			if out.Taken == 1 || st.Validity < out.NextFree {
				out.NextFree = st.Validity
			}
		}
	}
	return out, nil
}

// List pages through the held keys with prefix in key order; the cursor
// is the last key returned.
func (f *fakeLocker) List(ctx context.Context, prefix, cursor string, count int) (redlock.ListPage, error) {
	if f.down.Load() {
		return redlock.ListPage{}, f.outcome("list", redlock.ErrQuorumUnavailable)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var keys []string
	for k := range f.locks {
		if _, ok := f.holder(k); ok && strings.HasPrefix(k, prefix) && k > cursor {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var p redlock.ListPage
	for _, k := range keys[:min(count, len(keys))] {
		p.Locks = append(p.Locks, redlock.ListedLock{Key: k, Validity: time.Until(f.locks[k].until)})
	}
	if len(keys) > count {
		p.Cursor = keys[count-1]
	}
	return p, nil
}

// Masters reports each master's extra status with the state and vote
// derived as redlock does: down, else quarantined while QuarantineLeft > 0
// (votes do not count), else up.
func (f *fakeLocker) Masters() []redlock.MasterStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]redlock.MasterStatus, len(f.up))
	for i, up := range f.up {
		st := f.extra[i]
		st.Warnings = append([]string(nil), st.Warnings...)
		st.Index, st.Addr, st.Up = i, "127.0.0.1:"+string(rune('1'+i))+"379", up
		st.Latency, st.CheckedAt = 213*time.Microsecond, time.Now()
		switch {
		case !up:
			st.State, st.LastError = redlock.MasterDown, "dial tcp: connection refused"
		case st.QuarantineLeft > 0:
			st.State = redlock.MasterQuarantined
		default:
			st.State = redlock.MasterUp
		}
		st.Counting = st.State == redlock.MasterUp
		out[i] = st
	}
	return out
}

func (f *fakeLocker) Quorum() int { return 3 }
func (f *fakeLocker) Counters() HealthCounters {
	return HealthCounters{FenceRepairs: f.repairs.Load(), Quarantines: f.quarantines.Load()}
}

// LongestMaxTTL and ClockBounds are not known: /readyz omits them.
func (f *fakeLocker) LongestMaxTTL() time.Duration     { return 0 }
func (f *fakeLocker) ClockBounds() redlock.ClockBounds { return redlock.ClockBounds{} }
func (f *fakeLocker) Groups() *GroupsHealth            { return nil }

func (f *fakeLocker) setUp(i int, up bool) {
	f.mu.Lock()
	f.up[i] = up
	f.mu.Unlock()
}

// setStatus edits master i's extra status (everything but the address,
// up/down, state, vote and probe fields, which Masters derives).
func (f *fakeLocker) setStatus(i int, edit func(*redlock.MasterStatus)) {
	f.mu.Lock()
	edit(&f.extra[i])
	f.mu.Unlock()
}

func validOptions(l MasterLocker) *Options {
	return &Options{
		APIKeys: []APIKey{{Account: "acme", Hash: sha256.Sum256([]byte(testKeyAcme))}},
		Locker:  l,
		Health:  l,
		Metrics: NewMetrics(prometheus.NewRegistry()),
	}
}

func TestNewValidates(t *testing.T) {
	h := sha256.Sum256([]byte("k"))
	cases := []struct {
		name string
		mod  func(*Options)
		want string
	}{
		{"no locker", func(o *Options) { o.Locker = nil }, "Options.Locker: required"},
		{"no health", func(o *Options) { o.Health = nil }, "Options.Health: required"},
		{"no keys", func(o *Options) { o.APIKeys = nil }, "Options.APIKeys: at least one"},
		{"empty account", func(o *Options) { o.APIKeys = []APIKey{{Hash: h}} }, "APIKeys[0].Account"},
		{"zero hash", func(o *Options) { o.APIKeys = []APIKey{{Account: "a"}} }, "APIKeys[0] (a).Hash: missing"},
		{"long account", func(o *Options) { o.APIKeys = []APIKey{{Account: strings.Repeat("a", 65), Hash: h}} }, "APIKeys[0].Account: 65 bytes, the limit is 64"},
		{"duplicate account", func(o *Options) {
			o.APIKeys = append(o.APIKeys, APIKey{Account: "acme", Hash: h})
		}, `APIKeys[1].Account: "acme" is also APIKeys[0]`},
		{"duplicate key", func(o *Options) {
			o.APIKeys = append(o.APIKeys, APIKey{Account: "b", Hash: o.APIKeys[0].Hash})
		}, "APIKeys[1] (b).Hash: the same key as APIKeys[0]"},
		{"max ttl too big", func(o *Options) { o.MaxTTL = 86401 * time.Second }, "Options.MaxTTL: 24h0m1s is outside 1s to 24h0m0s"},
		{"max ttl negative", func(o *Options) { o.MaxTTL = -time.Second }, "Options.MaxTTL: -1s"},
		{"max ttl below a second", func(o *Options) { o.MaxTTL = 500 * time.Millisecond }, "Options.MaxTTL: 500ms is outside 1s to 24h0m0s"},
		{"max ttl not whole seconds", func(o *Options) { o.MaxTTL = 1500 * time.Millisecond }, "Options.MaxTTL: 1.5s is not a whole number of seconds"},
		{"default above max", func(o *Options) { o.MaxTTL, o.DefaultTTL = 10*time.Second, 20*time.Second }, "Options.DefaultTTL: 20s is outside 1s to MaxTTL (10s)"},
		{"default not whole seconds", func(o *Options) { o.DefaultTTL = 2500 * time.Millisecond }, "Options.DefaultTTL: 2.5s is not a whole number of seconds"},
		{"negative wait", func(o *Options) { o.MaxWait = -time.Second }, "Options.MaxWait"},
		{"tiny body", func(o *Options) { o.MaxBodyBytes = 10 }, "Options.MaxBodyBytes: 10"},
		{"negative shutdown", func(o *Options) { o.ShutdownTimeout = -1 }, "Options.ShutdownTimeout"},
		{"negative drain", func(o *Options) { o.DrainDelay = -1 }, "Options.DrainDelay"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := validOptions(newFakeLocker())
			tc.mod(o)
			_, err := New(nil, o)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := New(nil, nil)
	assert.Error(t, err)
}

func TestNewDefaults(t *testing.T) {
	s, err := New(nil, validOptions(newFakeLocker()))
	require.NoError(t, err)
	assert.Equal(t, lockBounds{defaultTTL: 30, maxTTL: 86400, maxWaitMS: 0}, s.lim)
	assert.EqualValues(t, DefaultMaxBodyBytes, s.maxBody)
	assert.Equal(t, DefaultShutdownTimeout, s.shutdownTimeout)

	o := validOptions(newFakeLocker())
	o.MaxTTL = 10 * time.Second
	s, err = New(nil, o)
	require.NoError(t, err)
	assert.EqualValues(t, 10, s.lim.defaultTTL, "the built-in default is lowered to MaxTTL")

	o = validOptions(newFakeLocker())
	o.Metrics = nil
	s, err = New(nil, o)
	require.NoError(t, err, "a nil Metrics gets a registry of its own")
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Contains(t, rec.Body.String(), "redlockd_requests_total")
}

// A Registerer that is not a Gatherer needs Options.Gatherer.
type registererOnly struct{ prometheus.Registerer }

func TestNewNeedsGatherer(t *testing.T) {
	o := validOptions(newFakeLocker())
	o.Metrics = NewMetrics(registererOnly{prometheus.NewRegistry()})
	_, err := New(nil, o)
	require.ErrorContains(t, err, "Options.Gatherer")
	o.Gatherer = prometheus.NewRegistry()
	_, err = New(nil, o)
	require.NoError(t, err)
}

func TestRunListensAndStops(t *testing.T) {
	o := validOptions(newFakeLocker())
	o.Listen = "127.0.0.1:0"
	s, err := New(nil, o)
	require.NoError(t, err)
	assert.Empty(t, s.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	require.Eventually(t, func() bool { return s.Addr() != "" }, 5*time.Second, 5*time.Millisecond)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://" + s.Addr() + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	cancel()
	require.NoError(t, <-done)
	assert.ErrorContains(t, s.Run(context.Background()), "called twice")

	o = validOptions(newFakeLocker())
	s, err = New(nil, o)
	require.NoError(t, err)
	assert.ErrorContains(t, s.Run(context.Background()), "Options.Listen")
}

func TestHandlerWithHTTPTest(t *testing.T) {
	f := newFakeLocker()
	s, err := New(nil, validOptions(f))
	require.NoError(t, err)
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/v1/lock", strings.NewReader(`{"key":"a"}`))
	req.Header.Set("X-API-Key", testKeyAcme)
	resp, err := hs.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, []string{redisKey("", "acme", "", "a")}, f.seenKeys())
}

// Shutting down: /readyz turns 503 at once, in-flight requests finish on a
// fresh context (the server's own is already cancelled), Serve returns nil.
func TestShutdownDrainsInFlight(t *testing.T) {
	f := newFakeLocker()
	f.block = make(chan struct{})
	f.blocked = make(chan struct{}, 1)
	o := validOptions(f)
	o.DrainDelay = 200 * time.Millisecond
	o.ShutdownTimeout = 5 * time.Second
	s, err := New(nil, o)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	base := "http://" + ln.Addr().String()

	type result struct {
		status int
		body   string
	}
	inflight := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/lock", strings.NewReader(`{"key":"slow"}`))
		req.Header.Set("X-API-Key", testKeyAcme)
		resp, err := client.Do(req)
		if err != nil {
			inflight <- result{body: err.Error()}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		inflight <- result{resp.StatusCode, string(b)}
	}()
	<-f.blocked
	cancel()
	require.Eventually(t, func() bool { return s.shuttingDown.Load() }, 5*time.Second, time.Millisecond)
	resp, err := client.Get(base + "/readyz")
	require.NoError(t, err, "the drain delay keeps serving")
	var rb readyBody
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rb))
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "shutting_down", rb.Status)
	assert.True(t, resp.Close, "answers while shutting down carry Connection: close")

	time.Sleep(300 * time.Millisecond) // past the drain delay: Shutdown is waiting for the request
	close(f.block)
	r := <-inflight
	assert.Equal(t, http.StatusOK, r.status, r.body)
	assert.Contains(t, r.body, `"acquired":true`)
	require.NoError(t, <-done)
	assert.Zero(t, f.cancelled.Load(), "the in-flight request was not cancelled")
}

// A request that outlives ShutdownTimeout has its context cancelled, and so
// does a client still sending its body (1 byte a second): both are cut off
// at the deadline, Serve still returns nil, and a warning says how many
// connections were cut.
func TestShutdownTimeoutCutsOff(t *testing.T) {
	f := newFakeLocker()
	f.block = make(chan struct{}) // never closed
	f.blocked = make(chan struct{}, 1)
	core, logs := observer.New(zapcore.InfoLevel)
	o := validOptions(f)
	o.ShutdownTimeout = 300 * time.Millisecond
	s, err := New(zap.New(core), o)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	clientDone := make(chan struct{})
	go func() {
		defer close(clientDone)
		req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/v1/lock", strings.NewReader(`{"key":"stuck"}`))
		req.Header.Set("X-API-Key", testKeyAcme)
		if resp, err := (&http.Client{Transport: tr}).Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-f.blocked

	// The slow client: headers, then its body one byte a second.
	slow, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer slow.Close()
	_, err = fmt.Fprintf(slow, "POST /v1/lock HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\nContent-Length: 100\r\n\r\n{", testKeyAcme)
	require.NoError(t, err)
	slowDone := make(chan error, 1)
	go func() {
		for {
			time.Sleep(time.Second)
			if _, err := slow.Write([]byte(" ")); err != nil {
				slowDone <- err
				return
			}
		}
	}()
	require.Eventually(t, func() bool { return s.inFlight.Load() == 2 }, 5*time.Second, time.Millisecond)

	cancel()
	require.NoError(t, <-done, "cutting slow clients off is a normal end")
	assert.EqualValues(t, 1, f.cancelled.Load(), "the stuck acquire saw its context cancelled")
	<-clientDone
	assert.Error(t, <-slowDone, "the slow client's connection was closed")
	cut := logs.FilterMessageSnippet("cut off").All()
	require.Len(t, cut, 1)
	assert.EqualValues(t, 2, cut[0].ContextMap()["connections_cut"])
	assert.EqualValues(t, 2, cut[0].ContextMap()["requests_in_handlers"])
}

// Unknown paths get the JSON envelope: 404, code not_found, a msg naming
// the path and the endpoints. A wrong method on a known path stays 405. A
// path or query carrying an API key is refused (400) without echoing it.
func TestNotFoundJSON(t *testing.T) {
	f := newFakeLocker()
	ts := newTestServer(t, f)
	for _, tc := range []struct{ method, path, name string }{
		{http.MethodPost, "/v1/lock/", `"/v1/lock/"`},
		{http.MethodPost, "/v1/LOCK", `"/v1/LOCK"`},
		{http.MethodGet, "/nope", `"/nope"`},
		{http.MethodDelete, "/v1/lock/x/y?x=1", `"/v1/lock/x/y"`},
		{http.MethodGet, "/" + strings.Repeat("p", 100), `"/` + strings.Repeat("p", 14) + `"…`},
		// A key inside a segment is no segment checkURL refuses; the cut
		// keeps it from coming back whole.
		{http.MethodPost, "/v1/x" + testKeyAcme, `"/v1/x` + testKeyAcme[:10] + `"…`},
		{http.MethodGet, "/healthz/", `"/healthz/"`},
	} {
		r := ts.do(t, tc.method, tc.path, `{"key":"a"}`, map[string]string{"X-API-Key": testKeyAcme})
		assert.Equal(t, http.StatusNotFound, r.Status, "%s %s: %s", tc.method, tc.path, r.Raw)
		assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
		assert.Equal(t, "err", r.Env.Ret)
		assert.Equal(t, codeNotFound, r.code())
		assert.Equal(t, "null", string(r.Env.Data))
		assert.Equal(t, "unknown path "+tc.name+"; the endpoints are POST /v1/lock, POST /gateway/distlock, GET /healthz, GET /readyz, GET /openapi.yaml, GET / (dashboard), GET /dashboard.js, GET /metrics, GET /v1/stats and GET /v1/history", r.Env.Msg)
		for _, ep := range []string{"POST /v1/lock", "POST /gateway/distlock", "GET /healthz", "GET /readyz", "GET /metrics", "GET /"} {
			assert.Contains(t, r.Env.Msg, ep)
		}
	}
	for _, tc := range []struct{ path, msg string }{
		{"/v1/lock/" + testKeyAcme, msgPathSecret},
		{"/" + testKeyGlobex + "/lock", msgPathSecret},
		{"/nope?foo=" + testKeyAcme, msgQuerySecret},
		{"/nope?api_key=secret-value-1", msgQuerySecret},
	} {
		r := ts.do(t, http.MethodGet, tc.path, "", nil)
		assert.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", tc.path, r.Raw)
		assert.Equal(t, codeBadRequest, r.code())
		assert.Equal(t, tc.msg, r.Env.Msg)
		for _, secret := range []string{testKeyAcme, testKeyGlobex, "secret-value-1"} {
			assert.NotContains(t, r.Raw, secret)
		}
	}
	assert.Zero(t, f.calls.Load())

	// A wrong method on a known path is still ServeMux's 405.
	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/v1/stats", "/", "/dashboard.js"} {
		r := ts.do(t, http.MethodPost, p, "", nil)
		assert.Equal(t, http.StatusMethodNotAllowed, r.Status, p)
		assert.Equal(t, "GET, HEAD", r.Header.Get("Allow"), p)
		assert.Equal(t, codeMethodNotAllowed, r.code(), p)
	}

	// "//v1/lock" is cleaned by ServeMux to /v1/lock with a redirect
	// (307 keeps the method and body); left as it is, see serveNotFound …
	noRedirect := &http.Client{Transport: ts.client.Transport, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	req, err := http.NewRequest(http.MethodPost, ts.URL+"//v1/lock", strings.NewReader(`{"key":"a"}`))
	require.NoError(t, err)
	resp, err := noRedirect.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusTemporaryRedirect, resp.StatusCode)
	assert.Equal(t, "/v1/lock", resp.Header.Get("Location"))
	resp, err = noRedirect.Get(ts.URL + "//v1/lock?x=1")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusTemporaryRedirect, resp.StatusCode)
	assert.Equal(t, "/v1/lock?x=1", resp.Header.Get("Location"))
	// … but never with a credential in Location: refused instead.
	for _, tc := range []struct{ path, msg string }{
		{"//v1/lock?foo=" + testKeyAcme, msgQuerySecret},
		{"/v1/./lock?api_key=secret-value-1", msgQuerySecret},
		{"//v1/lock/" + testKeyAcme, msgPathSecret},
	} {
		resp, err := noRedirect.Post(ts.URL+tc.path, "application/json", strings.NewReader(`{"key":"a"}`))
		require.NoError(t, err)
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", tc.path, raw)
		assert.Empty(t, resp.Header.Get("Location"))
		assert.Contains(t, string(raw), tc.msg)
		assert.NotContains(t, string(raw), testKeyAcme)
		assert.NotContains(t, string(raw), "secret-value-1")
	}
}
