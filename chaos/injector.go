package chaos

import (
	"context"
	"errors"
	"time"
)

// ErrUnsupported is returned, wrapped, by an Injector method its back-end
// cannot perform (the Docker back-end has no latency without the proxy
// containers of docker/chaos.compose.yml; it does not use tc netem).
// Scenarios that need it are reported as skipped on that target.
var ErrUnsupported = errors.New("chaos: fault not supported by this back-end")

// AllViews, given to Injector.Partition, cuts the masters off from every
// view instead of one.
const AllViews = -1

// Injector breaks and repairs the five masters of one deployment. Masters
// are numbered 0..N-1 in configuration order. A view is one vantage point
// onto the masters: a daemon (or a library client) with its own network
// path, so that a partition can cut one view off from some masters while
// another view still reaches them ("split view"). Every method returns once
// the fault is in force (a paused process is stopped, a killed one reaped),
// and is safe for concurrent use on different masters.
type Injector interface {
	// Kill stops master m at once (SIGKILL, docker kill): its data is gone
	// and it stays down until RestartEmpty.
	Kill(ctx context.Context, m int) error
	// Pause freezes master m (SIGSTOP, docker pause): connections stay
	// open and nothing is answered until Resume.
	Pause(ctx context.Context, m int) error
	// Resume continues a paused master.
	Resume(ctx context.Context, m int) error
	// RestartEmpty brings master m back (after a Kill, or killing it first)
	// with no data and a new run_id: the Redlock page's restart without
	// persistence.
	RestartEmpty(ctx context.Context, m int) error
	// Latency delays every byte to and from master m by d, for every view
	// (0 removes it).
	Latency(ctx context.Context, m int, d time.Duration) error
	// Blackhole drops every byte to and from master m, for every view,
	// while on; connections hang instead of failing.
	Blackhole(ctx context.Context, m int, on bool) error
	// Reset resets every open connection to master m once.
	Reset(ctx context.Context, m int) error
	// Partition cuts view (or AllViews) off from master m while on: open
	// connections fail and new ones are refused, or hang on Docker.
	Partition(ctx context.Context, view, m int, on bool) error
	// ClockJump steps master m's wall clock by d (its keys expire d
	// earlier; TIME jumps).
	ClockJump(ctx context.Context, m int, d time.Duration) error
	// ClockRate makes master m's wall clock run at rate (1.1: 10% fast)
	// from now on; 1 restores the real rate (keeping any skew).
	ClockRate(ctx context.Context, m int, rate float64) error
}
