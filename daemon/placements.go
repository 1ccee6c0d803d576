package daemon

import (
	"context"
	_ "embed"
	"strings"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// The placement registry: which layouts of master groups daemons lock on,
// and until when.
//
// Step 2 of a change of master groups (docs/operations.md, redlock/moving.go)
// must last max TTL after the last daemon on the old groups stopped: until
// then a lock it took on a moved key may stand in the key's old group
// only, which a daemon on the new groups does not ask. `redlockd
// groups-change` used to count from the last moving daemon's start, which
// is that moment only when every old daemon was gone by then; in a rolling
// update the new daemons start first and the old ones serve on through
// their drain. A black-box pass took a moved key through an old daemon
// after the moving one started, stopped the old one, and groups-change
// said "step 2 done" a second later: a daemon on the new groups then
// granted the key again, the first lock still valid.
//
// So every daemon registers its layout on the first group's masters (the
// first group is first in both lists of a change, so old and moving daemons
// share it) every health interval: a sorted set, member "<phase> <group
// names>", score the master's time (unix ms) until which the daemon may
// still be locking on that layout — now + placementAlive, well past its
// next registration. A moving daemon reads the score of "stable <its
// previous groups>" with its own registration, from a quorum of masters
// that kept their data since it started (a master that lost it may have
// lost a registration), and reports it in /readyz (placement
// old_until_ms); groups-change ends step 2 no sooner than that time plus
// the max TTL. The script runs after the vote prelude (QuorumScript), so a
// master that lost its data answers so and is not counted.
//
// What it does not see: an old daemon of an earlier version (it does not
// register; the moving daemons' start then bounds step 2, as before), and
// one that could not reach a quorum of the first group while it granted
// moved keys in another group.
//
//go:embed scripts/placements.lua
var placementRegistryScript string

var placementScript = redlock.NewQuorumScript(placementRegistryScript)

// PlacementKey is the placement registry's Redis key under prefix (not
// under "lock:", which lock listings scan).
func PlacementKey(prefix string) string { return prefix + "placements" }

// placementAlive is how long after a registration its daemon may still be
// locking on its layout: ten health intervals, at least 2 s, so that a
// registration that comes late on a loaded machine is still ahead of the
// daemon's last grant.
func placementAlive(interval time.Duration) time.Duration {
	return max(10*interval, 2*time.Second)
}

// PlacementLayout is the registry's member for a daemon on groups (their
// names, in order), moving from the groups from when from is not nil.
func PlacementLayout(from, groups []string) string {
	if from == nil {
		return "stable " + strings.Join(groups, ",")
	}
	return "moving " + strings.Join(from, ",") + ">" + strings.Join(groups, ",")
}

// RunPlacementRegistry registers layout on c's masters every interval
// until ctx ends (see the registry above). With watch (another layout's
// member, or "*" for every stable layout but layout: a daemon on the new
// groups asks whether daemons on other groups may still be locking) it
// reads watch's score with each registration and hands it to seen: the latest end of that layout's registrations (unix ms by the
// masters' clocks, 0 when none) with ok, or ok false when fewer than a
// quorum of masters that kept their data since since answered.
func RunPlacementRegistry(ctx context.Context, c *redlock.Client, key, layout, watch string, interval time.Duration, since time.Time, seen func(untilMS int64, ok bool)) {
	alive := placementAlive(interval).Milliseconds()
	t := time.NewTicker(max(interval, 10*time.Millisecond))
	defer t.Stop()
	for {
		until, trusted := int64(0), 0
		rctx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
		_ = c.RunQuorumScript(rctx, placementScript, key, []any{layout, alive, watch}, func(a redlock.MasterAnswer) bool {
			if a.Err == nil && a.Code == 1 && (a.KeptSince.IsZero() || a.KeptSince.Before(since)) {
				trusted++
				until = max(until, a.Value)
			}
			return false // every master is heard: the latest registration wins
		})
		cancel()
		if seen != nil {
			seen(until, trusted >= c.Quorum())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
