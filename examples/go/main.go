// Command go is a Go service that holds a redlockd lock for as long as its
// work takes, with the Go client (github.com/redlockd/redlockd/client):
// WithLock keeps the lock extended and cancels the work's context the
// moment the lock is lost.
//
//	REDLOCKD_URL=http://127.0.0.1:7070 REDLOCKD_API_KEY=dev-key-0123456789abcdef \
//	  go run ./examples/go --key job:daily_report --ttl 30s --work 2m
//
// Exit status: 0 done, 2 busy (another owner holds the lock), 3 lock lost
// (the work was stopped), 1 anything else.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redlockd/redlockd/client"
)

func main() {
	key := flag.String("key", "job:daily_report", "lock key")
	ttl := flag.Duration("ttl", 30*time.Second, "lock TTL (whole seconds); extended at about ttl/3")
	work := flag.Duration("work", 2*time.Minute, "how long the work takes")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := client.New(os.Getenv("REDLOCKD_URL"), os.Getenv("REDLOCKD_API_KEY"),
		// 503: retry after Retry-After, at most 2 s apart: a quarantine's
		// Retry-After can be minutes, and a job should fail in seconds,
		// saying why, rather than sit silent.
		client.WithRetry(client.RetryPolicy{Attempts: 3, MaxDelay: 2 * time.Second}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}

	err = c.WithLock(ctx, *key, *ttl, func(ctx context.Context, l *client.Lease) error {
		fmt.Printf("locked %s fence %d\n", l.Key(), l.Fence())
		return doWork(ctx, l.Fence(), *work)
	})
	switch {
	case err == nil:
		fmt.Println("done")
	case errors.Is(err, client.ErrLockHeld):
		var ce *client.Error
		errors.As(err, &ce)
		fmt.Fprintf(os.Stderr, "busy: held by another owner for %v more\n", ce.RetryAfter)
		os.Exit(2)
	case errors.Is(err, client.ErrLost):
		fmt.Fprintln(os.Stderr, "lock lost, work stopped:", err)
		os.Exit(3)
	default:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// doWork stands for the critical section: steps of 100 ms, each of which
// would pass fence to the resource it writes, stopping as soon as ctx is
// cancelled (the lock was lost, or a signal arrived).
func doWork(ctx context.Context, fence int64, d time.Duration) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
			// e.g. UPDATE ... SET last_fence = $fence WHERE id = $id AND last_fence < $fence
			_ = fence
		}
	}
	return nil
}
