package client_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/client"
	"github.com/redlockd/redlockd/internal/testdaemon"
)

// TestWaitingAcquireOnAHungDaemon: a waiting acquire sent to a daemon
// that hangs (SIGSTOP) gives up within its wait plus WaitAnswerMargin,
// not the wait plus the 10 s request timeout; a stopped wait
// (WithStopWaiting) on it gives up within StopAnswerTimeout of the stop
// (it waited out the request timeout). Both fail with ErrUnavailable, and
// once the daemon runs again it sees the caller gone: the key is not
// granted to the abandoned wait when its holder releases it.
func TestWaitingAcquireOnAHungDaemon(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	ctx := context.Background()
	held, err := c.Acquire(ctx, "hung:wait", time.Minute)
	require.NoError(t, err)
	pauseDaemon(t, d)

	const wait = 2 * time.Second
	start := time.Now()
	_, err = c.Acquire(ctx, "hung:wait", 30*time.Second, client.WithWait(wait))
	took := time.Since(start)
	require.ErrorIs(t, err, client.ErrUnavailable)
	assert.Less(t, took, wait+client.WaitAnswerMargin+3*time.Second, "took %v", took)
	assert.GreaterOrEqual(t, took, wait, "gave up before the wait ended")
	// The client's own timeout, not the caller's context: no context
	// error to match (ctx has no deadline).
	assert.NotErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, context.Canceled)

	stop := make(chan struct{})
	time.AfterFunc(time.Second, func() { close(stop) })
	start = time.Now()
	_, err = c.Acquire(ctx, "hung:wait", 30*time.Second, client.WithWait(25*time.Second), client.WithStopWaiting(stop))
	took = time.Since(start)
	require.ErrorIs(t, err, client.ErrUnavailable)
	assert.Contains(t, err.Error(), "did not answer within 1s of the stop")
	assert.Less(t, took, time.Second+client.StopAnswerTimeout+3*time.Second, "took %v", took)
	// A stopped wait is not a cancelled context: ctx is live (a black-box
	// pass: the abandoned request's context.Canceled matched).
	assert.NotErrorIs(t, err, context.Canceled, "%v", err)
	assert.NotErrorIs(t, err, context.DeadlineExceeded)

	require.NoError(t, d.Resume())
	// Resumed, the daemon sees both callers gone and ends their waits.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	require.Eventually(t, func() bool {
		resp, err := hc.Get(d.URL + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return regexp.MustCompile(`\nredlockd_acquires_waiting 0\n`).Match(raw)
	}, 10*time.Second, 10*time.Millisecond, "the abandoned waits go on in the daemon")
	require.NoError(t, held.Release(ctx))
	st, err := c.Status(ctx, "hung:wait")
	require.NoError(t, err)
	assert.False(t, st.Held, "a lock is held that nobody can name")
}

// pauseDaemon stops d (SIGSTOP) until the test ends; Pause returns once
// every thread of it is stopped.
func pauseDaemon(t *testing.T, d *testdaemon.Daemon) {
	t.Helper()
	require.NoError(t, d.Pause())
	t.Cleanup(func() { _ = d.Resume() })
}

// TestWithLockReleaseEndsWithTheValidity: WithLock's release after fn
// returned, against a daemon that stopped answering meanwhile, gives up
// once the lock's validity has ended (at least lostReleaseTimeout after
// fn), not a whole request timeout (10 s) later: past its validity the
// lock holds nothing its release must give back, its key ends with its
// TTL. Found beside lock run's twin (a black-box pass: the release
// retried 10 s past the validity).
func TestWithLockReleaseEndsWithTheValidity(t *testing.T) {
	d := startDaemon(t)
	c := newClient(t, d)
	var returned time.Time
	err := c.WithLock(context.Background(), "hung:withlock", 3*time.Second, func(ctx context.Context, l *client.Lease) error {
		pauseDaemon(t, d)
		returned = time.Now()
		return nil
	})
	took := time.Since(returned)
	require.Error(t, err, "the release could not be answered")
	assert.Less(t, took, 6*time.Second, "the release gave up %v after fn returned (its lock's validity was under 3 s)", took)
}
