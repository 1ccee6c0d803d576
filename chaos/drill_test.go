package chaos

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testConfig is the short drill: every workload scenario runs 3s (the
// fault in force for 1.5s, beyond the 1s TTL), so the whole matrix fits in
// about two minutes on a loaded two-core machine.
func testConfig(t *testing.T) Config {
	seed := uint64(1)
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
		seed = n
	}
	return Config{
		Duration: 3 * time.Second,
		TTL:      time.Second,
		Clients:  6,
		Keys:     3,
		Seed:     seed,
		// Other engineers' builds and fuzzers share these two cores with
		// -race builds of this package: bound calls generously, and let
		// a no-quorum failure take up to a second beyond 2 per-master
		// timeouts before calling it slow.
		Slack:     2 * time.Second,
		FastSlack: time.Second,
		Logf:      t.Logf,
	}
}

// runLocal runs one scenario on a fresh local target and returns the
// result, skipping the test when the target cannot inject its faults.
func runLocal(t *testing.T, sc *Scenario) *Result {
	t.Helper()
	return runLocalWith(t, sc, ProcessOptions{ClockShim: true, Logf: t.Logf}, testConfig(t))
}

// runLocalWith is runLocal on a target started with opts, run with cfg.
func runLocalWith(t *testing.T, sc *Scenario, opts ProcessOptions, cfg Config) *Result {
	t.Helper()
	target, err := NewProcessTarget(opts)
	require.NoError(t, err)
	defer func() { assert.NoError(t, target.Close()) }()
	out := t.TempDir()
	if dir := os.Getenv("CHAOS_OUT"); dir != "" {
		out = dir
		require.NoError(t, os.MkdirAll(out, 0o755))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res := Run(ctx, target, cfg, sc, out)
	if res.Skipped != "" {
		t.Skip(res.Skipped)
	}
	for _, n := range res.Notes {
		t.Logf("note: %s", n)
	}
	for _, v := range res.Violations {
		t.Logf("%s: %s", v.Invariant, v.Detail)
	}
	t.Logf("%s: %s, %d grants, %d failures, stale rejected %d, porcupine %s, p50 %v p99 %v, in %v",
		res.Scenario, res.Verdict(), res.Grants, res.Failures, res.StaleRejected, res.Linear, res.P50, res.P99, res.Elapsed.Round(time.Millisecond))
	return res
}

// TestDrills runs the whole matrix on the process back-end. Safe rows must
// show no violation; negative controls must catch theirs.
func TestDrills(t *testing.T) {
	only := os.Getenv("CHAOS_SCENARIO")
	for _, sc := range Matrix() {
		if only != "" && !strings.Contains(","+only+",", ","+sc.Name+",") {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			res := runLocal(t, sc)
			require.Empty(t, res.Error, "the drill itself failed")
			assert.Zero(t, res.Unexpected, "unexpected violations: %v", res.Counts)
			assert.Empty(t, res.Missed, "a negative control must catch its violation")
			if !sc.Control() {
				assert.Positive(t, res.Grants, "the workload must have run")
			}
			assert.NotEmpty(t, res.Timeline)
		})
	}
}
