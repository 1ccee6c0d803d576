package chaos

import (
	"context"
	"time"
)

// Target is one deployment to drill: N independent masters, the views onto
// them (a view is a daemon or a library client with its own network path),
// the daemons serving the HTTP API, and an Injector that breaks them.
//
// Two implementations: ProcessTarget (redis-server processes on loopback,
// proxies, an LD_PRELOAD clock shim, in-process daemons; for go test and
// `redlock-chaos drill --target local`) and DockerTarget (the docker-compose
// deployment; `--target compose`).
type Target interface {
	Injector
	// Name is "local" or "compose".
	Name() string
	// Masters is N.
	Masters() int
	// Views is how many views Partition and MasterAddrs accept.
	Views() int
	// MasterAddrs returns the addresses a library client of view v dials,
	// in master order; the faults of that view lie on this path.
	MasterAddrs(view int) []string
	// DirectAddrs returns addresses that reach the masters without going
	// through any view's faults, for reading them after a drill.
	DirectAddrs() []string
	// Daemons returns the daemons serving the HTTP API, one per view at
	// most (none is fine: the workload then uses the library only).
	Daemons() []Daemon
	// Space is the key layout and account the daemons use, so that library
	// clients lock the very same Redis keys and fencing counter as the
	// daemons' clients.
	Space() KeySpace
	// Supports reports whether the back-end can inject faults of kind.
	Supports(kind FaultKind) bool
	// Ready waits until every daemon reports every master counting towards
	// the quorum (not down, not quarantined, not awaiting a fencing
	// repair), or ctx ends.
	Ready(ctx context.Context) error
	// HealAll undoes every fault the Injector still has in force.
	HealAll(ctx context.Context) error
	// Close releases what the target started.
	Close() error
}

// Daemon is one redlockd serving the HTTP action API for a view.
type Daemon struct {
	Name   string // "a", "b"
	URL    string // base URL, http://127.0.0.1:port
	APIKey string
	View   int
	// PerMasterTimeout is the daemon's per-master timeout, for call bounds.
	PerMasterTimeout time.Duration
}

// FaultKind names what an Injector can do, for Target.Supports and reports.
type FaultKind string

// Fault kinds.
const (
	FaultKill      FaultKind = "kill"
	FaultPause     FaultKind = "pause"
	FaultRestart   FaultKind = "restart-empty"
	FaultLatency   FaultKind = "latency"
	FaultBlackhole FaultKind = "blackhole"
	FaultReset     FaultKind = "reset"
	FaultPartition FaultKind = "partition"
	// FaultViewPartition is a partition of one view, not all of them.
	FaultViewPartition FaultKind = "view-partition"
	FaultClock         FaultKind = "clock"
	// FaultHoldReply freezes a daemon's answer on its way to the client.
	FaultHoldReply FaultKind = "hold-reply"
)
