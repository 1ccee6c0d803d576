package redlock

import (
	_ "embed"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/extend.lua
	extendLua string
	//go:embed scripts/keep_record.lua
	keepRecordLua string
	//go:embed scripts/status.lua
	statusLua string
	//go:embed scripts/fence.lua
	fenceBody string
	// fenceLua opens with expiry.lua, as every script that sets a record's
	// expiry does.
	fenceLua = expiryLua + fenceBody
	//go:embed scripts/fence_repair.lua
	fenceRepairLua string
	//go:embed scripts/marker.lua
	markerLua string
	//go:embed scripts/repair.lua
	repairLua string
	//go:embed scripts/expiry.lua
	expiryLua string
	//go:embed scripts/vote_prelude.lua
	votePreludeBody string
	// votePreludeLua opens every vote script: expiry.lua (this master's
	// TIME, the one instant the script's expiries count from), then
	// vote_prelude.lua.
	votePreludeLua = expiryLua + votePreludeBody
	//go:embed scripts/stats_read.lua
	statsReadLua string
	//go:embed scripts/horizon_read.lua
	horizonReadLua string
	//go:embed scripts/scan.lua
	scanLua string
	//go:embed scripts/max_ttl.lua
	maxTTLLua string
	//go:embed scripts/clock_bounds.lua
	clockBoundsLua string
	//go:embed scripts/acquire_multi.lua
	acquireMultiLua string
	//go:embed scripts/extend_multi.lua
	extendMultiLua string
	//go:embed scripts/fence_multi.lua
	fenceMultiBody string
	fenceMultiLua  = expiryLua + fenceMultiBody
	//go:embed scripts/release_multi.lua
	releaseMultiLua string
	//go:embed scripts/slots_read.lua
	slotsReadLua string

	releaseScript = redis.NewScript(releaseLua)
	// statsReadScript follows a batch of votes (batchstats.go).
	statsReadScript = redis.NewScript(statsReadLua)

	fenceRepairScript = redis.NewScript(fenceRepairLua)
	markerScript      = redis.NewScript(markerLua)
	repairScript      = redis.NewScript(repairLua)
	maxTTLScript      = redis.NewScript(maxTTLLua)
	clockBoundsScript = redis.NewScript(clockBoundsLua)

	releaseMultiScript = redis.NewScript(releaseMultiLua)
	// slotsReadScript is a semaphore attempt's slots read (semaphore.go).
	slotsReadScript = redis.NewScript(slotsReadLua)

	// productScripts are the scripts of every Client with its guards on.
	productScripts = newScripts(luaSources{
		prelude: votePreludeLua, acquire: acquireLua, extend: extendLua, status: statusLua,
		fence: fenceLua, scan: scanLua, acquireMulti: acquireMultiLua, extendMulti: extendMultiLua, fenceMulti: fenceMultiLua,
	})
)

// scripts are the Lua scripts a Client sends that check something a
// negative control turns off: the product's (productScripts), or variants
// with the check taken out (controlScripts). The product scripts carry no
// switch for the controls: nothing a caller sends can skip a check.
type scripts struct {
	// The vote scripts share one opening (vote_prelude.lua): the master's
	// clock and the check that it still has the deployment's state.
	acquire, extend, status *redis.Script
	fence, scan             *redis.Script
	// The multi-key lock's (multikey.go).
	acquireMulti, extendMulti, fenceMulti *redis.Script
	// lane are loaded on every new lane connection (onConnect).
	lane []string
}

type luaSources struct {
	prelude, acquire, extend, status, fence, scan, acquireMulti, extendMulti, fenceMulti string
}

func newScripts(l luaSources) *scripts {
	vote := func(src string) string { return l.prelude + src }
	// The extend scripts also open with keep_record.lua (their restores).
	extend, extendMulti := vote(keepRecordLua+l.extend), vote(keepRecordLua+l.extendMulti)
	return &scripts{
		acquire:      redis.NewScript(vote(l.acquire)),
		extend:       redis.NewScript(extend),
		status:       redis.NewScript(vote(l.status)),
		fence:        redis.NewScript(l.fence),
		scan:         redis.NewScript(l.scan),
		acquireMulti: redis.NewScript(vote(l.acquireMulti)),
		extendMulti:  redis.NewScript(extendMulti),
		fenceMulti:   redis.NewScript(l.fenceMulti),
		lane: []string{vote(l.acquire), releaseLua, extend, vote(l.status), l.fence, l.scan, statsReadLua,
			vote(l.acquireMulti), extendMulti, l.fenceMulti, releaseMultiLua, slotsReadLua},
	}
}

// isVote reports whether s is one of sc's vote scripts (vote_prelude.lua),
// or a quorum script (quorumscript.go).
func (sc *scripts) isVote(s *redis.Script) bool {
	return s == sc.acquire || s == sc.extend || s == sc.status ||
		s == sc.acquireMulti || s == sc.extendMulti || isQuorumScript(s)
}

// The lines the negative controls take out of the product scripts.
const (
	// vote_prelude.lua: the master still has the deployment's state.
	intactLine = "local intact = marker and state[2] and (KEYS[4] == nil or state[3]) and true"
	// fence.lua and fence_multi.lua: the same, before the write-back.
	fenceIntactLine      = "if not (s[2] and s[3] and s[4]) then"
	fenceMultiIntactLine = "if not (s[1] and s[2] and s[3]) then"
	// scan.lua: the marker is there.
	scanIntactLine = "if redis.call('EXISTS', KEYS[1]) == 0 then"
	// extend.lua and extend_multi.lua: an extend never shortens a lock.
	neverShortensLine = "if left >= 0 and left < ttl then"
)

// controlScripts returns the scripts for o: productScripts when every
// guard the scripts carry is on, otherwise variants built from them with
// the guard's check taken out (a negative control's, reachable only
// through internal/guardswitch). It panics when a product script no
// longer has the line a variant takes out, so that an edit of a script
// cannot leave a control silently checking what it should not.
func controlScripts(o *options) *scripts {
	if o.dataLossGuard && o.extendNeverShortens {
		return productScripts
	}
	l := luaSources{
		prelude: votePreludeLua, acquire: acquireLua, extend: extendLua, status: statusLua,
		fence: fenceLua, scan: scanLua, acquireMulti: acquireMultiLua, extendMulti: extendMultiLua, fenceMulti: fenceMultiLua,
	}
	if !o.dataLossGuard {
		l.prelude = takeOut(l.prelude, intactLine, "local intact = true")
		l.fence = takeOut(l.fence, fenceIntactLine, "if false then")
		l.fenceMulti = takeOut(l.fenceMulti, fenceMultiIntactLine, "if false then")
		l.scan = takeOut(l.scan, scanIntactLine, "if false then")
	}
	if !o.extendNeverShortens {
		l.extend = takeOut(l.extend, neverShortensLine, "if left >= 0 then")
		l.extendMulti = takeOut(l.extendMulti, neverShortensLine, "if left >= 0 then")
	}
	return newScripts(l)
}

// takeOut replaces the one occurrence of line in src with by.
func takeOut(src, line, by string) string {
	if strings.Count(src, line) != 1 {
		panic(fmt.Sprintf("redlock: a negative control's script variant: %q is not in the script exactly once", line))
	}
	return strings.Replace(src, line, by, 1)
}
