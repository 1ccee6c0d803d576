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
	// Acquire takes key for ttl, retrying for up to wait.
	Acquire(ctx context.Context, key string, ttl, wait time.Duration) (grant, error)
	// Release releases key held by token.
	Release(ctx context.Context, key, token string) error
	// PerMasterTimeout is what bounds one attempt.
	PerMasterTimeout() time.Duration
}

// grant is a lock as the client knows it.
type grant struct {
	token string
	fence int64
	// validUntil is the end of validity, never later than the truth, with a
	// monotonic reading.
	validUntil time.Time
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

// libLocker takes locks with a redlock.Client in the daemons' key space.
// Its client may be replaced while calls run (Drill.replaceClients): each
// call uses the client it loaded when it began.
type libLocker struct {
	name  string
	cp    atomic.Pointer[redlock.Client]
	space KeySpace
	pmt   time.Duration
}

func newLibLocker(name string, c *redlock.Client, space KeySpace, pmt time.Duration) *libLocker {
	l := &libLocker{name: name, space: space, pmt: pmt}
	l.cp.Store(c)
	return l
}

// client returns the locker's redlock.Client now.
func (l *libLocker) client() *redlock.Client { return l.cp.Load() }

func (l *libLocker) Name() string                    { return l.name }
func (l *libLocker) PerMasterTimeout() time.Duration { return l.pmt }

func (l *libLocker) Acquire(ctx context.Context, key string, ttl, wait time.Duration) (grant, error) {
	var opts []redlock.AcquireOption
	if wait > 0 {
		opts = append(opts, redlock.WithWait(wait))
	} else {
		opts = append(opts, redlock.WithRetry(redlock.NoRetry()))
	}
	lk, err := l.client().Acquire(ctx, l.space.LockKey(key), ttl, opts...)
	if err != nil {
		return grant{}, err
	}
	return grant{token: lk.Token(), fence: lk.Fence(), validUntil: lk.ValidUntil()}, nil
}

func (l *libLocker) Release(ctx context.Context, key, token string) error {
	_, err := l.client().Release(ctx, l.space.LockKey(key), token)
	return err
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
		Token      string `json:"token"`
		Fence      int64  `json:"fence"`
		ValidityMS int64  `json:"validity_ms"`
		ElapsedMS  int64  `json:"elapsed_ms"`
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

func (l *httpLocker) Acquire(ctx context.Context, key string, ttl, wait time.Duration) (grant, error) {
	sent := time.Now()
	body := map[string]any{"action": "acquire", "key": key, "ttl": int64(ttl / time.Second)}
	if wait > 0 {
		body["wait_ms"] = wait.Milliseconds()
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
	return grant{token: r.Data.Token, fence: r.Data.Fence, validUntil: sent.Add(elapsed + time.Duration(r.Data.ValidityMS)*time.Millisecond)}, nil
}

func (l *httpLocker) Release(ctx context.Context, key, token string) error {
	_, r, err := l.call(ctx, map[string]any{"action": "release", "key": key, "token": token})
	if err != nil {
		return err
	}
	if !r.Data.Released {
		return &lockError{outcome: "not-held", err: errors.New(r.Msg)}
	}
	return nil
}
