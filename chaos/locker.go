package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// locker is one way for a drill client to take locks: the library over a
// view's addresses, or a daemon's HTTP API.
type locker interface {
	// Name is "lib/a", "http/b": transport and view.
	Name() string
	// Acquire takes a.key (or, with a.permits, a permit of the semaphore
	// a.key) for a.ttl, retrying for up to a.wait.
	Acquire(ctx context.Context, a acquireArgs) (grant, error)
	// Release releases the lock (or permit) of g.
	Release(ctx context.Context, g grant) error
	// AcquireMulti and ReleaseMulti take and release keys as one
	// multi-key lock (multikey.go).
	AcquireMulti(ctx context.Context, keys []string, ttl, wait time.Duration) (grant, error)
	ReleaseMulti(ctx context.Context, keys []string, token string) error
	// Status asks whether the lock key is held (I9): held, or an error
	// where the locker cannot tell (a lock only, not a permit).
	Status(ctx context.Context, key string) (held bool, err error)
	// PerMasterTimeout is what bounds one attempt.
	PerMasterTimeout() time.Duration
}

// acquireArgs is one acquire a drill client asks for.
type acquireArgs struct {
	key string
	ttl time.Duration
	// wait: retry for up to this long; 0 is a single attempt.
	wait time.Duration
	// lockDelay, when positive, asks for a lock-delay (lock_delay_ms).
	lockDelay time.Duration
	// permits, when positive, makes key a semaphore of this many permits.
	permits int
}

// grant is a lock (or a semaphore's permit) as the client knows it.
type grant struct {
	// key is the lock's key, or the semaphore's name for a permit.
	key string
	// permits is the semaphore's size for a permit (0 for a lock), and
	// slot the slot lock it holds.
	permits, slot int
	token         string
	fence         int64
	// validUntil is the end of validity, never later than the truth, with a
	// monotonic reading.
	validUntil time.Time
}

// historyKey is the key g is recorded under: the lock's, or for a permit
// its slot lock's, redlock.PermitKey(name, slot).
func (g grant) historyKey() string {
	if g.permits > 0 {
		return redlock.PermitKey(g.key, g.slot)
	}
	return g.key
}

// lockError is a failed call with its outcome class (see Op.Outcome).
type lockError struct {
	outcome string
	err     error
}

func (e *lockError) Error() string { return e.outcome + ": " + e.err.Error() }
func (e *lockError) Unwrap() error { return e.err }

func outcomeOf(err error) string {
	var le *lockError
	if errors.As(err, &le) {
		return le.outcome
	}
	switch {
	case errors.Is(err, redlock.ErrLockHeld):
		return "held"
	case errors.Is(err, redlock.ErrQuorumUnavailable):
		return "quorum"
	case errors.Is(err, redlock.ErrNotHeld):
		return "not-held"
	}
	return "error"
}

// libLocker takes locks with the library in the daemons' key space: a
// redlock.Client, or with master groups a redlock.Groups (or, while a
// placement change is drilled, a redlock.Moving) over one Client per
// group. Its clients and route may be replaced while calls run
// (Drill.replaceClients, Drill.SetRoute): each call uses the path it
// loaded when it began.
type libLocker struct {
	name  string
	cur   atomic.Pointer[libPath]
	space KeySpace
	pmt   time.Duration
}

// libPath is what a libLocker locks through: its view's Clients, one per
// master group, and the route of keys over them.
type libPath struct {
	clients []*redlock.Client
	route   lockRoute
}

// lockRoute is one way to reach a key's masters with the library.
type lockRoute interface {
	acquire(ctx context.Context, key string, ttl time.Duration, opts ...redlock.AcquireOption) (grant, error)
	release(ctx context.Context, key, token string) error
	extend(ctx context.Context, key, token string, ttl time.Duration) (validUntil time.Time, err error)
	status(ctx context.Context, key string) (held bool, err error)
}

// lockAPI is what redlock.Client and redlock.Groups both offer.
type lockAPI interface {
	Acquire(ctx context.Context, key string, ttl time.Duration, opts ...redlock.AcquireOption) (*redlock.Lock, error)
	Release(ctx context.Context, key, token string) (int, error)
	Extend(ctx context.Context, key, token string, ttl time.Duration) (*redlock.Lock, error)
	Status(ctx context.Context, key string) (redlock.Status, error)
}

// plainRoute locks through one Client, or a Groups.
type plainRoute struct{ api lockAPI }

func (r plainRoute) acquire(ctx context.Context, key string, ttl time.Duration, opts ...redlock.AcquireOption) (grant, error) {
	lk, err := r.api.Acquire(ctx, key, ttl, opts...)
	if err != nil {
		return grant{}, err
	}
	return grant{token: lk.Token(), fence: lk.Fence(), validUntil: lk.ValidUntil()}, nil
}

func (r plainRoute) release(ctx context.Context, key, token string) error {
	_, err := r.api.Release(ctx, key, token)
	return err
}

func (r plainRoute) extend(ctx context.Context, key, token string, ttl time.Duration) (time.Time, error) {
	lk, err := r.api.Extend(ctx, key, token, ttl)
	if err != nil {
		return time.Time{}, err
	}
	return lk.ValidUntil(), nil
}

func (r plainRoute) status(ctx context.Context, key string) (bool, error) {
	st, err := r.api.Status(ctx, key)
	return st.Held, err
}

// movingRoute locks through a redlock.Moving: a moved key in its old and
// its new group.
type movingRoute struct{ m *redlock.Moving }

func (r movingRoute) acquire(ctx context.Context, key string, ttl time.Duration, opts ...redlock.AcquireOption) (grant, error) {
	lk, err := r.m.Acquire(ctx, key, ttl, opts...)
	if err != nil {
		return grant{}, err
	}
	return grant{token: lk.Token(), fence: lk.Fence(), validUntil: lk.ValidUntil()}, nil
}

func (r movingRoute) release(ctx context.Context, key, token string) error {
	_, err := r.m.Release(ctx, key, token)
	return err
}

func (r movingRoute) extend(ctx context.Context, key, token string, ttl time.Duration) (time.Time, error) {
	lk, err := r.m.Extend(ctx, key, token, ttl)
	if err != nil {
		return time.Time{}, err
	}
	return lk.ValidUntil(), nil
}

func (r movingRoute) status(ctx context.Context, key string) (bool, error) {
	st, err := r.m.Status(ctx, key)
	return st.Held, err
}

// clientPath is the path of one Client of every master (one group).
func clientPath(c *redlock.Client) *libPath {
	return &libPath{clients: []*redlock.Client{c}, route: plainRoute{c}}
}

func newLibLocker(name string, p *libPath, space KeySpace, pmt time.Duration) *libLocker {
	l := &libLocker{name: name, space: space, pmt: pmt}
	l.cur.Store(p)
	return l
}

// client returns the locker's redlock.Client now: the only one, or the
// first group's.
func (l *libLocker) client() *redlock.Client { return l.cur.Load().clients[0] }

// setRoute makes later calls take route, over the same clients.
func (l *libLocker) setRoute(route lockRoute) {
	p := *l.cur.Load()
	p.route = route
	l.cur.Store(&p)
}

func (l *libLocker) Name() string                    { return l.name }
func (l *libLocker) PerMasterTimeout() time.Duration { return l.pmt }

func (l *libLocker) Acquire(ctx context.Context, a acquireArgs) (grant, error) {
	var opts []redlock.AcquireOption
	if a.wait > 0 {
		opts = append(opts, redlock.WithWait(a.wait))
	} else {
		opts = append(opts, redlock.WithRetry(redlock.NoRetry()))
	}
	if a.lockDelay > 0 {
		opts = append(opts, redlock.WithLockDelay(a.lockDelay))
	}
	if a.permits > 0 {
		p, err := l.client().AcquirePermit(ctx, l.space.LockKey(a.key), a.permits, a.ttl, opts...)
		if err != nil {
			return grant{}, err
		}
		return grant{key: a.key, permits: a.permits, slot: p.Slot, token: p.Token(), fence: p.Fence(), validUntil: p.ValidUntil()}, nil
	}
	g, err := l.cur.Load().route.acquire(ctx, l.space.LockKey(a.key), a.ttl, opts...)
	if err != nil {
		return grant{}, err
	}
	g.key = a.key
	return g, nil
}

func (l *libLocker) Release(ctx context.Context, g grant) error {
	if g.permits > 0 {
		_, err := l.client().Release(ctx, l.lockKey(g), g.token)
		return err
	}
	return l.cur.Load().route.release(ctx, l.lockKey(g), g.token)
}

func (l *libLocker) Status(ctx context.Context, key string) (bool, error) {
	return l.cur.Load().route.status(ctx, l.space.LockKey(key))
}

// lockKey is the Redis key of g's lock: its slot lock for a permit.
func (l *libLocker) lockKey(g grant) string {
	if g.permits > 0 {
		return redlock.PermitKey(l.space.LockKey(g.key), g.slot)
	}
	return l.space.LockKey(g.key)
}

// httpLocker calls a daemon's POST /v1/lock, through a front Proxy so that
// the drill can hold the daemon's replies.
type httpLocker struct {
	name   string
	url    string // of the front proxy
	apiKey string
	ns     string
	pmt    time.Duration
	hc     *http.Client
}

func (l *httpLocker) Name() string                    { return l.name }
func (l *httpLocker) PerMasterTimeout() time.Duration { return l.pmt }

type lockReply struct {
	Ret  string `json:"ret"`
	Msg  string `json:"msg"`
	Code string `json:"code"`
	Data *struct {
		Acquired   bool   `json:"acquired"`
		Released   bool   `json:"released"`
		Extended   bool   `json:"extended"`
		Held       bool   `json:"held"`
		Token      string `json:"token"`
		Fence      int64  `json:"fence"`
		ValidityMS int64  `json:"validity_ms"`
		ElapsedMS  int64  `json:"elapsed_ms"`
		Slot       int    `json:"slot"`
	} `json:"data"`
}

func (l *httpLocker) call(ctx context.Context, body map[string]any) (int, lockReply, error) {
	if l.ns != "" {
		body["namespace"] = l.ns
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.url+"/v1/lock", bytes.NewReader(b))
	if err != nil {
		return 0, lockReply{}, err
	}
	req.Header.Set("X-API-Key", l.apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.hc.Do(req)
	if err != nil {
		return 0, lockReply{}, &lockError{outcome: "error", err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, lockReply{}, &lockError{outcome: "error", err: err}
	}
	var r lockReply
	if err := json.Unmarshal(raw, &r); err != nil {
		return resp.StatusCode, r, &lockError{outcome: "error", err: fmt.Errorf("HTTP %d: %q", resp.StatusCode, raw)}
	}
	switch {
	case resp.StatusCode == http.StatusServiceUnavailable:
		return resp.StatusCode, r, &lockError{outcome: "quorum", err: fmt.Errorf("HTTP 503 %s: %s", r.Code, r.Msg)}
	case resp.StatusCode != http.StatusOK || r.Data == nil:
		return resp.StatusCode, r, &lockError{outcome: "error", err: fmt.Errorf("HTTP %d %s: %s", resp.StatusCode, r.Code, r.Msg)}
	}
	return resp.StatusCode, r, nil
}

func (l *httpLocker) Acquire(ctx context.Context, a acquireArgs) (grant, error) {
	sent := time.Now()
	body := map[string]any{"action": "acquire", "key": a.key, "ttl": int64(a.ttl / time.Second)}
	if a.wait > 0 {
		body["wait_ms"] = a.wait.Milliseconds()
	}
	if a.lockDelay > 0 {
		body["lock_delay_ms"] = a.lockDelay.Milliseconds()
	}
	if a.permits > 0 {
		body["permits"] = a.permits
	}
	_, r, err := l.call(ctx, body)
	if err != nil {
		return grant{}, err
	}
	if !r.Data.Acquired {
		return grant{}, &lockError{outcome: "held", err: errors.New(r.Msg)}
	}
	// The daemon measured validity_ms elapsed_ms after it began on the
	// request, which was after we sent: counting both from our send time is
	// never later than the truth, and charges no wait against the validity.
	elapsed := min(time.Duration(r.Data.ElapsedMS)*time.Millisecond, time.Since(sent))
	g := grant{key: a.key, permits: a.permits, token: r.Data.Token, fence: r.Data.Fence, validUntil: sent.Add(elapsed + time.Duration(r.Data.ValidityMS)*time.Millisecond)}
	if a.permits > 0 {
		g.slot = r.Data.Slot
	}
	return g, nil
}

func (l *httpLocker) Release(ctx context.Context, g grant) error {
	body := map[string]any{"action": "release", "key": g.key, "token": g.token}
	if g.permits > 0 {
		body["slot"] = g.slot
	}
	_, r, err := l.call(ctx, body)
	if err != nil {
		return err
	}
	if !r.Data.Released {
		return &lockError{outcome: "not-held", err: errors.New(r.Msg)}
	}
	return nil
}

func (l *httpLocker) Status(ctx context.Context, key string) (bool, error) {
	_, r, err := l.call(ctx, map[string]any{"action": "status", "key": key})
	if err != nil {
		return false, err
	}
	return r.Data.Held, nil
}
