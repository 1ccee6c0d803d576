package daemon

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest/observer"
)

// leavesAfterGrant is the real Locker of a deployment on real masters,
// with one moment made certain: after a grant, it tells the test
// (granted) when armed, which then closes the caller's connection, and returns only
// once the server has seen the caller go (the request's context ended).
// That is a client whose timeout, cancelled wait or death falls between
// the masters' grant and the answer.
type leavesAfterGrant struct {
	MasterLocker
	armed   atomic.Bool // the next grant is abandoned
	granted chan struct{}
}

func (l *leavesAfterGrant) Acquire(ctx context.Context, req AcquireRequest) (Lease, error) {
	lease, err := l.MasterLocker.Acquire(ctx, req)
	if err == nil && l.armed.CompareAndSwap(true, false) {
		l.granted <- struct{}{}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
		}
	}
	return lease, err
}

// TestGrantToACallerThatWentAwayIsReleased: a lock granted to a caller
// that went away before its answer (which alone carries the token) is
// released at once, not left to block its key for the whole TTL: a plain
// lock, a semaphore permit and a multi-key set. Each is then free for
// the next caller.
func TestGrantToACallerThatWentAwayIsReleased(t *testing.T) {
	d := newDeployment(t)
	l := &leavesAfterGrant{MasterLocker: d.locker(t), granted: make(chan struct{}, 1)}
	ts := newTestServer(t, l, func(o *Options) { o.KeyPrefix = d.prefix })
	headers := map[string]string{"X-API-Key": testKeyAcme, "Content-Type": "application/json"}
	for name, body := range map[string]string{
		"lock":      `{"key":"gone:lock","ttl":60,"wait_ms":1000}`,
		"permit":    `{"key":"gone:permit","ttl":60,"permits":1}`,
		"multi-key": `{"keys":["gone:a","gone:b"],"ttl":60}`,
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			l.armed.Store(true)
			go func() {
				<-l.granted
				cancel()
			}()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/lock", strings.NewReader(body))
			require.NoError(t, err)
			for k, v := range headers {
				req.Header.Set(k, v)
			}
			_, err = ts.client.Do(req)
			require.ErrorIs(t, err, context.Canceled, "the caller went away before the answer")
			// The next caller gets the lock well within its 60 s TTL.
			require.Eventually(t, func() bool {
				r := ts.lock(t, testKeyAcme, body)
				return r.Status == http.StatusOK && r.data(t)["acquired"] == true
			}, 5*time.Second, 50*time.Millisecond, "the abandoned grant still holds %s", name)
			// The line is written after the release (releaseAbandoned):
			// the next caller may win the key before it.
			// Its own line, not another subtest's.
			want := map[string]string{"lock": "gone:lock", "permit": "gone:permit", "multi-key": "gone:a"}[name]
			assert.Eventually(t, func() bool {
				return ts.Logs.FilterMessage("lock granted to a caller that went away: released").Filter(func(e observer.LoggedEntry) bool {
					return strings.Contains(fmt.Sprint(e.ContextMap()["keys"]), want)
				}).Len() > 0
			}, 5*time.Second, 10*time.Millisecond, "the release of %s is logged", name)
		})
	}
}

// TestIdemBeginForACallerThatWentAwayIsAborted: an idem_begin that
// started an attempt for a caller that went away before the answer (the
// only place its token is) is aborted at once, so that the caller's retry
// starts it again instead of getting 409 in_progress for the whole lease
// (60 s here). The next begin answers started, first attempt over again.
func TestIdemBeginForACallerThatWentAwayIsAborted(t *testing.T) {
	d := newDeployment(t)
	ts := d.idemServer(t)
	gone := make(chan struct{}, 1)
	var armed atomic.Bool
	armed.Store(true)
	ts.Server.idem.begun = func(ctx context.Context) {
		if armed.CompareAndSwap(true, false) {
			gone <- struct{}{}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
			}
		}
	}
	body := `{"action":"idem_begin","key":"gone:job","fingerprint":"` + strings.Repeat("ab", 32) + `","lease":60}`
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-gone
		cancel()
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/lock", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-API-Key", testKeyAcme)
	req.Header.Set("Content-Type", "application/json")
	_, err = ts.client.Do(req)
	require.ErrorIs(t, err, context.Canceled, "the caller went away before the answer")
	var r *response
	require.Eventually(t, func() bool {
		r = ts.lock(t, testKeyAcme, body)
		return r.Status == http.StatusOK
	}, 5*time.Second, 50*time.Millisecond, "the abandoned attempt still holds its lease")
	assert.Equal(t, "started", r.idem(t).Outcome, r.Raw)
	assert.NotEmpty(t, ts.Logs.FilterMessage("idempotency attempt begun for a caller that went away: aborted").All())
}
