package daemon

import (
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// MasterHealth is what the daemon reads about the masters behind its
// Locker: GET /readyz, the scrape-time metrics of GET /metrics, the
// dashboard's history, and the counts and expected return in the message
// of a 503 quorum_unavailable. Options.Health takes it.
type MasterHealth interface {
	// Masters is a snapshot of every master, in configuration order: State,
	// Counting, quarantine, clock and warnings as redlock.MasterStatus
	// documents them. The daemon derives quorum availability from it (at
	// least Quorum masters Counting and not refusing writes), so that
	// /readyz and /metrics show one consistent picture.
	Masters() []redlock.MasterStatus
	// Quorum is the number of masters that must agree: N/2+1
	// (redlock.Client.VotesNeeded).
	Quorum() int
	// Counters are the health counters since start.
	Counters() HealthCounters
	// LongestMaxTTL is the longest max TTL known on the masters
	// (redlock.Client.LongestMaxTTL); 0 when not known, and /readyz then
	// omits longest_max_ttl_s.
	LongestMaxTTL() time.Duration
	// ClockBounds are the clock bounds in use (redlock.Client.ClockBounds);
	// the zero value when not known, and /readyz then omits clock_bounds.
	ClockBounds() redlock.ClockBounds
	// Groups is each master group's own health when the masters are
	// served as several groups (NewGroupsLocker, NewMovingLocker); nil
	// when they are one group.
	Groups() *GroupsHealth
}

// HealthCounters are the counters MasterHealth.Counters reports, each
// since start.
type HealthCounters struct {
	// FenceRepairs is how many fencing counters of masters that lost their
	// data were repaired from a quorum (redlock.Client.FenceRepairs).
	FenceRepairs int64
	// Quarantines is how many times a master was quarantined
	// (redlock.Client.Quarantines).
	Quarantines int64
	// GrantRefusals is how many acquires were refused over a granted lock
	// (redlock.Client.GrantRefusals).
	GrantRefusals int64
	// ContendedRetries is how many attempts one-shot acquires made again
	// after a contended one (redlock.Client.ContendedRetries).
	ContendedRetries int64
	// DataLosses is how many times a master was found to have lost lock
	// state, per reason (redlock.Client.DataLosses); nil counts as none.
	DataLosses map[redlock.DataLossReason]int64
}

// GroupsHealth is the health of masters served as several master groups:
// each group has its own quorum, and a key's lock needs its own group's.
type GroupsHealth struct {
	// Groups are every group served, in order.
	Groups []GroupHealth
	// To are the names of the groups keys are placed on. From, when not
	// nil, are those of the previous groups while the placement moves from
	// them to To (config previous_master_groups), since Since; a moved
	// key is then locked in both.
	From, To []string
	Since    time.Time
	// RegistryUntilMS: until when daemons on other groups may still be
	// locking, by the placement registry (unix ms; 0 none registered, -1
	// not read from a quorum yet): those on From while moving, those on
	// any other stable layout while stable.
	RegistryUntilMS int64
	// RegistryReadMS: when the last reading of the registry from a quorum
	// was sent (unix ms, this daemon's clock; 0 none yet). When it is not
	// after RegistryUntilMS, those registrations were live when read, and
	// may have been renewed since.
	RegistryReadMS int64
}

// GroupHealth is one master group's health.
type GroupHealth struct {
	Name   string
	Health MasterHealth
	// Ops is how many calls of each operation (acquire, release, extend,
	// status) this daemon sent to the group since start.
	Ops GroupOps
}

// GroupOps counts calls to a master group, per operation.
type GroupOps struct{ Acquire, Release, Extend, Status int64 }

// named is o by operation name, as /readyz and /metrics label it.
func (o GroupOps) named() map[string]int64 {
	return map[string]int64{"acquire": o.Acquire, "release": o.Release, "extend": o.Extend, "status": o.Status}
}

// MasterLocker is a Locker that also reports the health of its masters:
// what NewRedlockLocker, NewGroupsLocker and NewMovingLocker return. Pass
// it as both Options.Locker and Options.Health.
type MasterLocker interface {
	Locker
	MasterHealth
}
