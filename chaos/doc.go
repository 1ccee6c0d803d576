// Package chaos runs fault drills against a redlockd deployment and checks
// that the lock kept its promises.
//
// A drill is a Scenario run on a Target:
//
//   - Targets: ProcessTarget starts five redis-server processes on
//     loopback (internal/redisproc), a TCP Proxy per (view, master) for the
//     network faults, the LD_PRELOAD clock shim (internal/clockshim) and two
//     in-process daemons; DockerTarget drives the docker-compose
//     deployment through the Docker API (ory/dockertest's client). Both
//     implement Injector: kill, pause/resume, restart empty, latency,
//     blackhole, reset, partition (of every view, or of one), clock jump
//     and rate.
//   - The workload: M clients × K keys, through the library and through the
//     daemons' HTTP API, contending for the same Redis keys and fencing
//     counter (KeySpace). Each critical section writes "begin" and
//     "commit" to a fenced Resource, which rejects stale fencing tokens.
//     Probes take fresh, uncontended keys.
//   - The checker (Check) reads the recorded History: I1 no overlapping
//     leases of a key (a direct interval check); I2 fences increase in
//     real-time order (direct, and porcupine's linearizability check of a
//     fence register, which also draws the HTML timeline) and the Resource
//     accepted no stale write; I3 every call within its bound; I4 no lock key
//     outlives its TTL (a sweep of every master afterwards); I5 with at most
//     N − quorum masters faulty, uncontended acquires succeed; I6 with more,
//     none does and they fail fast.
//   - The matrix (Matrix): workload rows with one fault window each, and
//     arranged rows placed so that the outcome is certain: negative controls
//     that turn a protection off (through internal/guardswitch: the
//     quarantine, the clock guard, the data-loss check, the vote clock
//     check, the clock reference, the granted-lock check) and must be
//     caught, their protected twins, and a holder paused past its TTL whose
//     stale write the fence must reject. The arranged rows: restart-empty,
//     clock-fast, data-wipe, clock-jump-contender, clock-jump-restart,
//     rollback (a master holding a lock goes back to a copy of its data
//     from before the lock's extend: SWAPDB with a copied database), each
//     with its control, and pause-holder.
//
// The fault fuzzer (RunFuzz, `redlock-chaos fuzz`) draws a FuzzSchedule
// from a seed (GenerateFuzzSchedule: episodes of lock operations and
// faults on at most N − quorum masters), runs it on a ProcessTarget with
// the same checker, and shrinks a schedule that finds a safety violation
// (ShrinkFuzz) into a Go test (ReproTest). FuzzControls are its negative
// controls.
//
// # What a passing drill shows, and what it does not
//
// A pass means that, in the histories this run produced, the checker found
// no violation outside a scenario's expectations, and that each negative
// control produced the violation it exists to produce — so the checker is
// known to see that kind of damage. It is evidence, not proof: a workload
// explores a few thousand interleavings, and timing on a loaded machine
// decides which. I1 compares intervals measured by the clients on their own
// monotonic clocks, with every lease's end taken conservatively (a daemon's
// validity_ms counted from when the request was sent), so a reported
// overlap is real; an unreported one may have been too short to observe.
// Call bounds (I3, I6's "fast") include a Slack for a loaded machine.
//
// Faults this package cannot inject: packet loss and reordering short of a
// blackhole, asymmetric partitions between masters (they never talk to each
// other) and disk faults (the masters run without persistence). On the
// compose target, latency, blackholes and resets need the proxy containers
// of docker/chaos.compose.yml between the daemons and the masters (the
// drills do not use tc netem); without them they are skipped.
package chaos
