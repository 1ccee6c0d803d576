package redlock

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fenceWarning is the start of the message issuedFloor logs when the
// masters' fencing counters are below a fence the Client issued.
const fenceWarning = "fencing counters are below a fence this client issued"

// logBuffer collects a Client's log records (slog text), safe for the
// Client's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), msg)
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// TestNoFenceWarningForConcurrentAcquires: 32 clients of one Client
// acquire and release keys of their own, on fresh counters. An acquire
// whose votes were read before an overlapping acquire of another key wrote
// its higher fence back is not a counter that went back: no warning.
func TestNoFenceWarningForConcurrentAcquires(t *testing.T) {
	ctx := context.Background()
	fenceKey := "fence:" + newKey(t)
	for _, r := range direct(t) {
		require.NoError(t, r.Set(ctx, fenceKey, 0, 0).Err()) // fresh masters
	}
	var logs logBuffer
	c := newClient(t, WithFenceKey(fenceKey), WithLogger(logs.logger()))
	base := newKey(t)
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 20 {
				l, err := c.Acquire(ctx, fmt.Sprintf("%s:%d:%d", base, g, i), 10*time.Second)
				if !assert.NoError(t, err) {
					return
				}
				assert.NoError(t, l.Release(ctx))
			}
		})
	}
	wg.Wait()
	assert.Zero(t, logs.count(fenceWarning), "%s", logs.b.String())
}
