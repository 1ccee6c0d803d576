package client_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/client"
	"github.com/redlockd/redlockd/internal/testdaemon"
)

// TestStdlibOnly: importing the client must not pull in go-redis, zap or
// Docker.
func TestStdlibOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "github.com/redlockd/redlockd/client", strings.TrimSpace(string(out)))
}

func TestNewRefusesBadArguments(t *testing.T) {
	for _, tc := range []struct{ url, key, want string }{
		{"127.0.0.1:7070", "k", `base URL "127.0.0.1:7070": no scheme; give http:// or https:// before the host, e.g. http://127.0.0.1:7070`},
		{"localhost:7070", "k", `base URL "localhost:7070": no scheme; give http:// or https:// before the host, e.g. http://localhost:7070`},
		{"ftp://x", "k", "scheme"},
		{"http://", "k", "missing host"},
		{"http://x/?api_key=k", "k", "query"},
		{"http://x", "", "API key"},
		{"http://x", "dev-key-0123456789abcdef\r", "API key: contains a control character"},
		{"http://x", "dev-key\n0123", "API key: contains a control character"},
	} {
		_, err := client.New(tc.url, tc.key)
		require.ErrorIs(t, err, client.ErrInvalid, tc.url)
		assert.Contains(t, err.Error(), tc.want)
		if len(tc.key) > 8 {
			assert.NotContains(t, err.Error(), tc.key[:8], "the key is not repeated")
		}
	}
	_, err := client.New("HTTPS://x", "k", nil)
	require.NoError(t, err, "a scheme is case-insensitive; a nil option is none")
}

func TestLeaseLifecycle(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	ctx := context.Background()

	l, err := c.Acquire(ctx, "order:pay:1", 30*time.Second, nil, client.WithNamespace("shop")) // a nil option is none
	require.NoError(t, err)
	assert.Equal(t, "order:pay:1", l.Key())
	assert.Equal(t, "shop", l.Namespace())
	assert.Len(t, l.Token(), 32)
	assert.Positive(t, l.Fence())
	assert.Equal(t, 30*time.Second, l.TTL())
	assert.WithinDuration(t, time.Now().Add(30*time.Second), l.ValidUntil(), 2*time.Second)
	assert.False(t, l.ValidUntil().After(time.Now().Add(30*time.Second)), "never later than the daemon's validity")

	// Held: a second acquire is refused with the holder's remaining time.
	_, err = c.Acquire(ctx, "order:pay:1", 30*time.Second, client.WithNamespace("shop"))
	require.ErrorIs(t, err, client.ErrLockHeld)
	var ce *client.Error
	require.ErrorAs(t, err, &ce)
	assert.InDelta(t, 30, ce.RetryAfter.Seconds(), 1)
	assert.Equal(t, "lock is held by another owner", ce.Msg)
	// Another namespace is another lock.
	other, err := c.Acquire(ctx, "order:pay:1", 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, other.Release(ctx))

	st, err := l.Status(ctx)
	require.NoError(t, err)
	assert.True(t, st.Held)
	assert.Greater(t, st.Validity, 25*time.Second)
	assert.Equal(t, l.Fence(), st.Fence, "status shows the holder's fence")

	before := l.ValidUntil()
	require.NoError(t, l.Extend(ctx, 60*time.Second))
	assert.Equal(t, 60*time.Second, l.TTL())
	assert.True(t, l.ValidUntil().After(before))
	// A shorter extend never shortens the lock: TTL says how long it lasts.
	before = l.ValidUntil()
	require.NoError(t, l.Extend(ctx, 5*time.Second))
	assert.Greater(t, l.TTL(), 50*time.Second, "the daemon reports the longer time left")
	assert.False(t, l.ValidUntil().Before(before))
	e, err := c.Extend(ctx, "order:pay:1", l.Token(), 60*time.Second, client.WithNamespace("shop"))
	require.NoError(t, err)
	assert.Equal(t, l.Token(), e.Token())
	assert.Equal(t, l.Fence(), e.Fence(), "extend reports the holder's fence")
	assert.True(t, e.ValidUntil().After(before))
	require.NoError(t, e.Release(ctx))
	<-e.Done()

	require.ErrorIs(t, l.Release(ctx), client.ErrNotHeld, "released through e already")
	<-l.Done()
	assert.ErrorIs(t, l.Err(), client.ErrReleased)
	// Released: a second release, and an extend by token, are "not held".
	err = c.Release(ctx, "order:pay:1", l.Token(), client.WithNamespace("shop"))
	require.ErrorIs(t, err, client.ErrNotHeld)
	assert.Contains(t, err.Error(), "expired or was already released")
	_, err = c.Extend(ctx, "order:pay:1", l.Token(), 10*time.Second, client.WithNamespace("shop"))
	require.ErrorIs(t, err, client.ErrNotHeld)
	// The released lease refuses without a request.
	require.ErrorIs(t, l.Extend(ctx, time.Minute), client.ErrReleased)
	st, err = c.Status(ctx, "order:pay:1", client.WithNamespace("shop"))
	require.NoError(t, err)
	assert.False(t, st.Held)
	assert.Zero(t, st.Fence)
}

// TestStatusFenceAcrossDaemons: two daemons on the same masters and key
// prefix; the fence of a lock taken through one is what the other's
// status and extend report, and a newer holder's fence replaces it.
func TestStatusFenceAcrossDaemons(t *testing.T) {
	prefix := fmt.Sprintf("client%d:", prefixSeq.Add(1))
	var ds [2]*testdaemon.Daemon
	for i := range ds {
		d, err := testdaemon.Start(testdaemon.Options{Binary: binary, Masters: masterAddrs(), KeyPrefix: prefix, LogPath: t.TempDir() + "/daemon.log"})
		require.NoError(t, err)
		t.Cleanup(func() { _ = d.Stop() })
		ds[i] = d
	}
	a, b := newClient(t, ds[0]), newClient(t, ds[1])
	ctx := context.Background()

	l, err := a.Acquire(ctx, "job:x", 30*time.Second)
	require.NoError(t, err)
	st, err := b.Status(ctx, "job:x")
	require.NoError(t, err)
	assert.Equal(t, l.Fence(), st.Fence)
	e, err := b.Extend(ctx, "job:x", l.Token(), 60*time.Second)
	require.NoError(t, err)
	assert.Equal(t, l.Fence(), e.Fence())
	require.NoError(t, l.Release(ctx))
	st, err = b.Status(ctx, "job:x")
	require.NoError(t, err)
	assert.False(t, st.Held)
	assert.Zero(t, st.Fence)

	n, err := b.Acquire(ctx, "job:x", 30*time.Second)
	require.NoError(t, err)
	require.Greater(t, n.Fence(), l.Fence())
	st, err = a.Status(ctx, "job:x")
	require.NoError(t, err)
	assert.Equal(t, n.Fence(), st.Fence)
	require.NoError(t, n.Release(ctx))
}

func TestTypedErrors(t *testing.T) {
	d := startDaemon(t)
	ctx := context.Background()

	bad, err := client.New(d.URL, "wrong-key-0123456789")
	require.NoError(t, err)
	_, err = bad.Acquire(ctx, "k", 5*time.Second)
	require.ErrorIs(t, err, client.ErrUnauthorized)
	var ce *client.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 401, ce.Status)
	assert.Equal(t, "unauthorized", ce.Code)

	c := newClient(t, d)
	_, err = c.Acquire(ctx, strings.Repeat("k", 513), 5*time.Second)
	require.ErrorIs(t, err, client.ErrInvalid)
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 400, ce.Status)
	assert.Equal(t, "key: 513 bytes is above the maximum of 512 bytes", ce.Msg)
	_, err = c.Acquire(ctx, "k", 200*time.Hour)
	require.ErrorIs(t, err, client.ErrInvalid)
	assert.Contains(t, err.Error(), "ttl: 720000 is above the maximum of 86400")
	_, err = c.Acquire(ctx, "k", 500*time.Millisecond)
	require.ErrorIs(t, err, client.ErrInvalid, "refused before sending")
	// A zero ttl (an unset field) is refused like 500ms, not sent without
	// a ttl (which the daemon would answer with its default_ttl).
	_, err = c.Acquire(ctx, "k", 0)
	require.ErrorIs(t, err, client.ErrInvalid)
	assert.Contains(t, err.Error(), "ttl 0s is below the minimum of 1s")
	_, err = c.Acquire(ctx, "k", 5*time.Second, client.WithLockDelay(-time.Nanosecond))
	require.ErrorIs(t, err, client.ErrInvalid)
	assert.Contains(t, err.Error(), "lock delay -1ns is negative")
	lease, err := c.Acquire(ctx, "k0", 5*time.Second)
	require.NoError(t, err)
	_, err = c.Extend(ctx, "k0", lease.Token(), 0)
	require.ErrorIs(t, err, client.ErrInvalid)
	err = lease.Extend(ctx, 0)
	require.ErrorIs(t, err, client.ErrInvalid)
	assert.Equal(t, 5*time.Second, lease.TTL(), "a refused extend changes nothing")
	require.NoError(t, lease.Release(ctx))
	err = c.Release(ctx, "k", "not-a-token")
	require.ErrorIs(t, err, client.ErrInvalid)
	assert.Contains(t, err.Error(), "token: must be the 32 lowercase hex characters")
	// Strings that are not UTF-8 would reach the daemon as U+FFFD, another
	// key: refused before sending, naming the field.
	_, err = c.Acquire(ctx, "caf\xe9", 5*time.Second)
	require.ErrorIs(t, err, client.ErrInvalid)
	assert.Contains(t, err.Error(), "key: must be valid UTF-8")
	_, err = c.Acquire(ctx, "", 5*time.Second, client.WithKeys("a", "b\xff"))
	assert.ErrorContains(t, err, "keys[1]: must be valid UTF-8")
	_, err = c.Acquire(ctx, "k", 5*time.Second, client.WithNamespace("\xff"))
	assert.ErrorContains(t, err, "namespace: must be valid UTF-8")
	_, err = c.Begin(ctx, "caf\xe9", client.Fingerprint([]byte("x")))
	require.ErrorIs(t, err, client.ErrInvalid)
	assert.ErrorContains(t, err, "key: must be valid UTF-8")
	_, err = c.Begin(ctx, "k", client.Fingerprint([]byte("x")), client.WithIdemNamespace("b\xf6b"))
	assert.ErrorContains(t, err, "namespace: must be valid UTF-8")

	// A daemon that is gone is "unavailable".
	require.NoError(t, d.Stop())
	_, err = c.Acquire(ctx, "k", 5*time.Second)
	require.ErrorIs(t, err, client.ErrUnavailable)
	assert.NotContains(t, err.Error(), testdaemon.APIKey)
}

func TestUnavailableAndRetry(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d, client.WithRetry(client.RetryPolicy{Attempts: 2, MaxDelay: 100 * time.Millisecond}))
	ctx := context.Background()
	pauseMasters(t, 3, d)

	_, err := c.Acquire(ctx, "retry:1", 5*time.Second)
	require.ErrorIs(t, err, client.ErrUnavailable)
	var ce *client.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 503, ce.Status)
	assert.Equal(t, "quorum_unavailable", ce.Code)
	assert.Equal(t, time.Second, ce.RetryAfter, "the Retry-After header")

	// The caller's context ends the retries, and is reported.
	patient := newClient(t, d, client.WithRetry(client.RetryPolicy{Attempts: 1000}))
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = patient.Acquire(cctx, "retry:1", 5*time.Second)
	require.ErrorIs(t, err, client.ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// Retries honour Retry-After until the masters are back.
	resumed := make(chan struct{})
	go func() {
		time.Sleep(1500 * time.Millisecond)
		for _, s := range servers[:3] {
			_ = s.Resume()
		}
		close(resumed)
	}()
	l, err := patient.Acquire(ctx, "retry:1", 5*time.Second)
	<-resumed
	require.NoError(t, err, "acquired once the masters answered again")
	require.NoError(t, l.Release(ctx))
	for _, s := range servers[:3] {
		require.NoError(t, s.Pause()) // pauseMasters' cleanup resumes them
	}
}

// TestKeepAliveHoldsForThreeTTL: a lease kept alive for 3× its TTL stays
// held, under the same fence, and nobody else gets it meanwhile.
func TestKeepAliveHoldsForThreeTTL(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ttl = 3 * time.Second

	l, err := c.Acquire(ctx, "keepalive:1", ttl)
	require.NoError(t, err)
	l.KeepAlive(ctx)
	first := l.ValidUntil()
	end := time.Now().Add(3 * ttl)
	for time.Now().Before(end) {
		_, err := c.Acquire(ctx, "keepalive:1", ttl)
		require.ErrorIs(t, err, client.ErrLockHeld)
		select {
		case <-l.Done():
			t.Fatalf("lost while kept alive: %v", l.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	require.NoError(t, l.Err())
	assert.True(t, l.ValidUntil().After(first.Add(2*ttl)), "validity moved with the extends")
	require.NoError(t, l.Release(ctx))
	// Fences are one sequence per deployment (this daemon's key prefix):
	// the next acquire's fence follows the lease's at once, so no other
	// acquisition took a fence while the lease was kept alive.
	next, err := c.Acquire(ctx, "keepalive:1", ttl)
	require.NoError(t, err)
	assert.Equal(t, l.Fence()+1, next.Fence(), "the fence did not change while the lease was kept alive")
	require.NoError(t, next.Release(ctx))
}

// waitLoss waits for l.Done and returns when it was observed.
func waitLoss(t *testing.T, l *client.Lease, limit time.Duration) time.Time {
	t.Helper()
	select {
	case <-l.Done():
		return time.Now()
	case <-time.After(limit):
		t.Fatalf("Done not closed within %v", limit)
		return time.Time{}
	}
}

func TestDoneBeforeValidityWhenMastersPause(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	l, err := c.Acquire(ctx, "loss:masters", 3*time.Second)
	require.NoError(t, err)
	l.KeepAlive(ctx)
	pauseMasters(t, 3, d)
	lostAt := waitLoss(t, l, 10*time.Second)
	assert.True(t, lostAt.Before(l.ValidUntil()), "Done closed at %v, validity ends %v", lostAt, l.ValidUntil())
	require.ErrorIs(t, l.Err(), client.ErrLost)
	require.ErrorIs(t, l.Err(), client.ErrUnavailable, "the last extend's error is reported: %v", l.Err())
	assert.Contains(t, l.Err().Error(), "validity about to end without a confirmed extend")
}

func TestDoneBeforeValidityWhenDaemonStops(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	l, err := c.Acquire(ctx, "loss:daemon", 3*time.Second)
	require.NoError(t, err)
	l.KeepAlive(ctx)
	require.NoError(t, d.Kill())
	lostAt := waitLoss(t, l, 10*time.Second)
	assert.True(t, lostAt.Before(l.ValidUntil()), "Done closed at %v, validity ends %v", lostAt, l.ValidUntil())
	require.ErrorIs(t, l.Err(), client.ErrLost)
}

func TestDoneWhenExtendRefused(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	ctx := context.Background()
	l, err := c.Acquire(ctx, "loss:refused", 30*time.Second)
	require.NoError(t, err)
	// Someone releases it with the token (a stale copy of the lease).
	require.NoError(t, c.Release(ctx, "loss:refused", l.Token()))
	err = l.Extend(ctx, 30*time.Second)
	require.ErrorIs(t, err, client.ErrNotHeld)
	<-l.Done()
	require.ErrorIs(t, l.Err(), client.ErrLost)
	require.ErrorIs(t, l.Err(), client.ErrNotHeld)
}

func TestDoneWithoutKeepAlive(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	l, err := c.Acquire(context.Background(), "loss:idle", 3*time.Second)
	require.NoError(t, err)
	lostAt := waitLoss(t, l, 5*time.Second)
	assert.True(t, lostAt.Before(l.ValidUntil()))
	require.ErrorIs(t, l.Err(), client.ErrLost)
}

func TestWithLockCancelsOnLoss(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	var ran atomic.Bool
	var validUntil time.Time
	err := c.WithLock(context.Background(), "withlock:loss", 3*time.Second, func(ctx context.Context, l *client.Lease) error {
		ran.Store(true)
		pauseMasters(t, 3, d)
		<-ctx.Done()
		validUntil = l.ValidUntil()
		require.True(t, time.Now().Before(validUntil), "cancelled before validity ended")
		require.ErrorIs(t, context.Cause(ctx), client.ErrLost)
		return nil
	})
	require.True(t, ran.Load())
	require.ErrorIs(t, err, client.ErrLost, "a loss is reported even when fn returns nil")
}

// TestWithLockJoinsTheLossToFnsCancellation: fn returning its context's
// error, as most code does, after a loss: the loss is joined, so that
// errors.Is(err, ErrLost) says why (it was context.Canceled alone, with
// the caller's context never cancelled: a black-box pass).
func TestWithLockJoinsTheLossToFnsCancellation(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	err := c.WithLock(context.Background(), "withlock:lossctx", 3*time.Second, func(ctx context.Context, l *client.Lease) error {
		pauseMasters(t, 3, d)
		<-ctx.Done()
		return ctx.Err()
	})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, client.ErrLost, "the loss is why fn's context ended")
}

// TestWithLockLostOnAHungDaemon: the daemon stops answering (SIGSTOP)
// while fn runs. The lock is lost; WithLock's release then only cleans up
// and gives up after lostReleaseTimeout (2 s), not the request timeout
// (10 s) a caller used to wait for a daemon that no longer answers.
func TestWithLockLostOnAHungDaemon(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	var returned time.Time
	err := c.WithLock(context.Background(), "withlock:hung", 2*time.Second, func(ctx context.Context, l *client.Lease) error {
		require.NoError(t, d.Pause())
		t.Cleanup(func() { _ = d.Resume() })
		<-ctx.Done()
		returned = time.Now()
		return nil
	})
	require.ErrorIs(t, err, client.ErrLost)
	took := time.Since(returned)
	assert.Less(t, took, 6*time.Second, "the release of a lost lock waited %v", took)
}

func TestWithLockReleases(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	ctx := context.Background()
	held := func() bool {
		st, err := c.Status(ctx, "withlock:1")
		require.NoError(t, err)
		return st.Held
	}

	err := c.WithLock(ctx, "withlock:1", 30*time.Second, func(ctx context.Context, l *client.Lease) error {
		assert.True(t, held())
		return nil
	})
	require.NoError(t, err)
	assert.False(t, held(), "released after fn")

	boom := errors.New("boom")
	err = c.WithLock(ctx, "withlock:1", 30*time.Second, func(context.Context, *client.Lease) error { return boom })
	require.ErrorIs(t, err, boom)
	assert.False(t, held(), "released after an error")

	func() {
		defer func() { assert.Equal(t, "panic in fn", recover()) }()
		_ = c.WithLock(ctx, "withlock:1", 30*time.Second, func(context.Context, *client.Lease) error { panic("panic in fn") })
	}()
	assert.False(t, held(), "released after a panic")

	// Busy: fn does not run.
	l, err := c.Acquire(ctx, "withlock:1", 30*time.Second)
	require.NoError(t, err)
	err = c.WithLock(ctx, "withlock:1", 30*time.Second, func(context.Context, *client.Lease) error {
		t.Error("fn ran while the lock was held")
		return nil
	})
	require.ErrorIs(t, err, client.ErrLockHeld)
	require.NoError(t, l.Release(ctx))
}

// TestExtendThatSucceedsAfterTheLoss: an extend sent to a daemon that
// stopped answering (SIGSTOP) is still on its way when the lease counts
// as lost (LossMargin before its validity); the daemon resumes and runs
// it. Extend must not answer nil for a lease whose Done is closed and Err
// is ErrLost, and the lock it extended is released, not left to stand for
// the new TTL with nobody to use it. A black-box pass saw nil (8 of 8) and
// the lock held on. Without the fix the Extend below returns nil.
//
// The daemon probes its masters every second here: with the tests' 50 ms,
// its layout gate's permit (five health intervals) ran out during the
// pause. Even so a resumed daemon may refuse the extend (503: it counts
// its masters again only once it has read their clocks after the pause),
// in about half the trials: such a trial is run again, with a new key.
func TestExtendThatSucceedsAfterTheLoss(t *testing.T) {
	d := startDaemon(t, "REDLOCKD_HEALTH_INTERVAL=1s")
	c, other := newClient(t, d), newClient(t, d)
	ctx := context.Background()
	for trial := range 12 {
		key := fmt.Sprintf("extend:afterloss:%d", trial)
		l, err := c.Acquire(ctx, key, time.Second)
		require.NoError(t, err)
		// Every thread stopped before the extend is sent: SIGSTOP is
		// delivered asynchronously, and a daemon still running answered
		// the extend in time once under -race (nil, rightly: the lease
		// was not lost yet).
		pauseDaemon(t, d)
		got := make(chan error, 1)
		go func() { got <- l.Extend(ctx, 3*time.Second) }()
		<-l.Done() // LossMargin (100 ms) before the validity ends: the keys still stand
		require.ErrorIs(t, l.Err(), client.ErrLost)
		require.NoError(t, d.Resume())
		err = <-got
		require.Error(t, err, "an extend answered after the loss never revives the lease")
		require.ErrorIs(t, l.Err(), client.ErrLost)
		if !errors.Is(err, client.ErrLost) {
			t.Logf("trial %d: the resumed daemon refused the extend: %v", trial, err)
			require.Eventually(t, func() bool { st, err := other.Status(ctx, key); return err == nil && !st.Held }, 10*time.Second, 50*time.Millisecond)
			continue
		}
		l2, err := other.Acquire(ctx, key, 3*time.Second, client.WithWait(2*time.Second))
		require.NoError(t, err, "the extended lock was released, not left for its new TTL")
		require.NoError(t, l2.Release(ctx))
		return
	}
	t.Fatal("the resumed daemon refused the extend in every trial")
}
