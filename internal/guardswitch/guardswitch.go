// Package guardswitch turns off one protection of package redlock, for the
// negative controls of this repository's tests and drills: a control runs a
// fault with the protection off and must see the safety check fail.
//
// It lives under internal/ so that code outside this repository cannot
// import it: a user of package redlock has no way to turn a protection off.
// Package redlock sets Disable in an init function; Disable returns a
// redlock.Option typed as any, because redlock imports this package and
// this package cannot import redlock:
//
//	opt := guardswitch.Disable(guardswitch.Quarantine).(redlock.Option)
//
// Disable is nil in a program that does not link package redlock.
package guardswitch

// Guard names one protection of a redlock.Client.
type Guard int

// The protections a negative control can turn off.
const (
	// Quarantine: the delayed-restart protection. With it off, a master
	// that lost its data (restart without persistence, missing marker,
	// snapshot older than its start) votes again at once, with its fencing
	// counter as it found it, and a clock jump does not quarantine.
	Quarantine Guard = iota + 1
	// ClockGuard: the clock-jump and drift checks of every health probe.
	ClockGuard
	// DataLossCheck: the vote scripts' and probes' check that a master
	// still has the deployment's state (marker, lease horizon, fencing
	// counter, evicted_keys, role). With it off, a master that lost its
	// data without a restart (FLUSHALL, DEL, eviction, REPLICAOF) votes on.
	DataLossCheck
	// VoteClock: the check of the master's clock returned with every vote.
	// With it off, a jump is seen only at the next health probe.
	VoteClock
	// ClockReference: the comparison of each master's clock with the other
	// masters'. With it off, a jump made while no daemon watched is never
	// seen.
	ClockReference
	// ClockAllowance: the part of the drift allowance that covers jumps too
	// small for the clock checks to see.
	ClockAllowance
	// ExtendNeverShortens: with it off, an extend with a shorter TTL sets
	// it, also on the masters of an extend that then fails.
	ExtendNeverShortens
	// StatusQuorum: with it off, status calls a lock free whenever a
	// quorum answered, even when the masters that did not answer could
	// hold it.
	StatusQuorum
	// GrantedLock: an acquire that wins a quorum is refused when another
	// master answered that a granted lock (one whose fence record is
	// there) holds the key. With it off, a master that silently lost a
	// lock (a rollback, an eviction) lets a contender in beside its holder.
	GrantedLock
	// SharedClockBounds: the registry of clock bounds on the masters. With
	// it off, a Client neither registers its drift factor and blind spot
	// nor reads other clients': each judges clocks and budgets validities
	// by its own options alone.
	SharedClockBounds
	// RepairKeepsBaselines: adopting a repair marker that carries no
	// quarantine (the one `redlockd repair-fences` writes on a master it
	// finds intact) keeps what the Client read from the master before
	// (eviction count, lease horizon and fencing counter seen,
	// replication ID). With it off, adopting any repair marker resets
	// them, as the Client once did: a rollback just before a
	// repair-fences run goes unseen.
	RepairKeepsBaselines
	// FenceAboveEveryAnswer: an acquire's fence is above the fencing
	// counter of every master that answered its votes, yes or no. With it
	// off, it is above its yes votes' counters only, as read when the
	// votes needed were in: when the only master its votes share with the
	// last holder's write-back lost that write unseen (a rollback no
	// running client read before), the fence is issued again.
	FenceAboveEveryAnswer
	// ExtendRestores: an extend that a quorum granted sets the lock again
	// on the counting masters that answered it absent. Off in every
	// negative control of the drills, whose holder's lock must stay on
	// the masters it was placed on (its extends model ones that never
	// reached the others); a liveness guard, not a safety one.
	ExtendRestores
	// RepairJudgesReads: a repair's reads of the other masters' lease
	// horizons and fencing counters are checked against what the Client
	// read from them before, as a probe's are. With it off, a master
	// rolled back unseen counts in the quorum that repairs another, and a
	// majority rolled back one master at a time reopens without
	// `redlockd repair-fences`.
	RepairJudgesReads
)

// String returns the guard's name, e.g. "quarantine".
func (g Guard) String() string {
	switch g {
	case Quarantine:
		return "quarantine"
	case ClockGuard:
		return "clock guard"
	case DataLossCheck:
		return "data-loss check"
	case VoteClock:
		return "vote clock check"
	case ClockReference:
		return "clock reference"
	case ClockAllowance:
		return "clock allowance"
	case ExtendNeverShortens:
		return "extend never shortens"
	case StatusQuorum:
		return "status quorum"
	case ExtendRestores:
		return "extend restores copies"
	case GrantedLock:
		return "granted-lock check"
	case SharedClockBounds:
		return "shared clock bounds"
	case RepairKeepsBaselines:
		return "repair keeps baselines"
	case FenceAboveEveryAnswer:
		return "fence above every answer"
	case RepairJudgesReads:
		return "repair judges its reads"
	}
	return "unknown guard"
}

// Disable returns a redlock.Option, as any, that turns g off. It panics on
// a Guard it does not know. Set by package redlock.
var Disable func(g Guard) any
