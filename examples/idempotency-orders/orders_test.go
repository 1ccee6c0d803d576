package orders

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/client"
	"github.com/redlockd/redlockd/internal/redisproc"
	"github.com/redlockd/redlockd/internal/testdaemon"
	"github.com/redlockd/redlockd/internal/testmasters"
)

var (
	servers []*redisproc.Server
	binary  string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "orders-example")
	if err == nil {
		binary, err = testdaemon.Build(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := testmasters.Run(m, 5, &servers)
	os.RemoveAll(dir)
	os.Exit(code)
}

// service is a Service over a fresh SQLite file and a real daemon (the
// `redlockd serve` binary) over the real masters.
func service(t *testing.T, opts ...client.IdemOption) *Service {
	t.Helper()
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	d, err := testdaemon.Start(testdaemon.Options{Binary: binary, Masters: addrs, KeyPrefix: "orders-" + t.Name() + ":"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Stop() })
	c, err := client.New(d.URL, testdaemon.APIKey)
	require.NoError(t, err)
	db, err := Open(filepath.Join(t.TempDir(), "orders.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return &Service{DB: db, Locks: c, Options: opts}
}

func countOrders(t *testing.T, s *Service, key string) int {
	t.Helper()
	var n int
	require.NoError(t, s.DB.QueryRow(`SELECT count(*) FROM orders WHERE request_key = ?`, key).Scan(&n))
	return n
}

// TestCrashAfterCommitBeforeComplete: the first attempt commits its order
// and dies before completing the record. The retry after the lease ended
// is a take-over (expired_in_progress), finds the order by its request
// key, completes with it, and no second order exists.
func TestCrashAfterCommitBeforeComplete(t *testing.T) {
	s := service(t, client.WithLease(time.Second), client.WithRetention(time.Hour))
	ctx := context.Background()
	req := Request{SKU: "A1", Qty: 2}

	// The crash: AfterCommit ends the goroutine (runtime.Goexit), so
	// Idempotent neither completes nor aborts, and its lease extender
	// stops with the work's context, as a dead process's would.
	crashed := make(chan struct{})
	s.AfterCommit = func() {
		close(crashed)
		runtime.Goexit()
	}
	go func() { _, _ = s.Place(ctx, "req-001", req) }()
	<-crashed
	s.AfterCommit = nil
	require.Equal(t, 1, countOrders(t, s, "req-001"))

	// While the crashed attempt's lease lasts: 409.
	_, err := s.Place(ctx, "req-001", req)
	require.ErrorIs(t, err, client.ErrInProgress)

	var ans client.Answer
	require.Eventually(t, func() bool {
		ans, err = s.Place(ctx, "req-001", req)
		return err == nil
	}, 10*time.Second, 100*time.Millisecond, "last error: %v", err)
	require.Equal(t, 201, ans.Status)
	require.Equal(t, 1, countOrders(t, s, "req-001"), "no second order")
	require.EqualValues(t, 1, s.Reconciled.Load(), "the retry was a take-over that found the order")
	var id int64
	require.NoError(t, s.DB.QueryRow(`SELECT id FROM orders WHERE request_key = ?`, "req-001").Scan(&id))
	require.Equal(t, fmt.Sprintf(`{"order_id":%d}`, id), string(ans.Body))

	again, err := s.Place(ctx, "req-001", req)
	require.NoError(t, err)
	require.Equal(t, ans, again, "a later retry replays the answer")
	require.Equal(t, 1, countOrders(t, s, "req-001"))
}

// TestExpiredRecordUniqueConstraint: after the record's retention, a
// retry starts afresh, and the database's unique constraint still
// refuses a second order.
func TestExpiredRecordUniqueConstraint(t *testing.T) {
	s := service(t, client.WithLease(time.Second), client.WithRetention(2*time.Second))
	ctx := context.Background()
	req := Request{SKU: "B2", Qty: 1}
	first, err := s.Place(ctx, "req-002", req)
	require.NoError(t, err)
	time.Sleep(2500 * time.Millisecond) // the record's retention ends
	again, err := s.Place(ctx, "req-002", req)
	require.NoError(t, err)
	require.Equal(t, first.Body, again.Body, "the same order, found by the unique key")
	require.Equal(t, 1, countOrders(t, s, "req-002"))
}

// TestStaleFenceRefused: the late write of an attempt whose lease ended is
// refused once a later attempt wrote with its higher fence.
func TestStaleFenceRefused(t *testing.T) {
	s := service(t)
	ctx := context.Background()
	_, err := s.insert(ctx, "req-003", Request{SKU: "C", Qty: 1}, 5)
	require.NoError(t, err)
	require.NoError(t, s.SetStatus(ctx, "req-003", "paid", 7))
	require.ErrorIs(t, s.SetStatus(ctx, "req-003", "cancelled", 5), ErrStaleFence)
	var status string
	require.NoError(t, s.DB.QueryRow(`SELECT status FROM orders WHERE request_key = 'req-003'`).Scan(&status))
	require.Equal(t, "paid", status)
}
