package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/redlock"
)

// commandCheckLua runs, with redis.pcall, every command the product's
// scripts call (redlock/scripts, redlock/idempotency/scripts,
// daemon/limits/scripts; TestCommandCheckCoversEveryScriptCommand keeps
// the list whole) on three scratch keys under the key prefix, and deletes
// them in the same script, so no other client ever sees them. It returns
// one line per call that failed, "<command>\t<error>"; commandRefusals
// keeps the errors that would fail the daemon's own calls on this master
// whatever the keys hold: an ACL refusal of the command, a key or a
// channel, or a command the master does not know (a Redis older than 7.0
// has no PEXPIRETIME).
// KEYS[1..3] a string, a hash and a sorted set; ARGV[1] the release
// channel; ARGV[2] a unix time in milliseconds 10 s ahead (PEXPIREAT).
const commandCheckLua = `
local bad = {}
local function try(name, ...)
  local r = redis.pcall(name, ...)
  if type(r) == 'table' and r.err then
    table.insert(bad, name .. '\t' .. r.err)
  end
end
local s, h, z = KEYS[1], KEYS[2], KEYS[3]
try('SET', s, '1', 'PX', '10000')
try('GET', s)
try('MGET', s, h)
try('EXISTS', s)
try('PTTL', s)
try('PEXPIRE', s, '10000')
try('PEXPIREAT', s, ARGV[2])
try('PEXPIRETIME', s)
try('TIME')
try('INFO', 'stats')
try('HSET', h, 'f', '1')
try('PEXPIRE', h, '10000')
try('HGET', h, 'f')
try('HGETALL', h)
try('ZADD', z, '1', 'm')
try('PEXPIRE', z, '10000')
try('ZCARD', z)
try('ZRANGE', z, '0', '-1')
try('ZSCORE', z, 'm')
try('ZREM', z, 'm')
try('ZREMRANGEBYSCORE', z, '-inf', '+inf')
try('SCAN', '0', 'MATCH', s, 'COUNT', '1')
-- An empty message: no waiter takes it for a release (redlock/wait.go
-- releaseMessage).
try('PUBLISH', ARGV[1], '')
try('DEL', s, h, z)
return table.concat(bad, '\n')
`

// optionalCommands are the commands the daemon works without: SCAN only
// serves the operators' listings (GET /admin/locks, the idempotency
// records' listing), which answer 503 on masters that refuse it
// (docs/operations.md, TLS).
var optionalCommands = map[string]string{
	"scan": "GET /admin/locks and the idempotency records' listing answer 503 while it refuses SCAN; add +scan to use them",
}

// commandProblem asks master i (addr), which answered PING as the
// daemon's ACL user, to run each command the daemon runs there: the
// commands the lock, limits and idempotency scripts call
// (commandCheckLua), and EVAL, EVALSHA, SCRIPT LOAD, INFO and SUBSCRIBE
// to the release channel of keyPrefix's marker key. It returns what the
// master refuses, or does not know (Redis older than 7.0), with what to
// change ("" when nothing): without the check such a daemon starts, shows
// the master up, and fails every vote on it with NOPERM. Refusals of
// optional commands (optionalCommands) are returned as warnings. A master
// that stops answering is not a problem here (as in checkMasterAccess):
// its refusal, if any, is named later in its 503s and its last error.
func commandProblem(ctx context.Context, r *redis.Client, i int, addr, keyPrefix string) (problem string, warnings []string) {
	refused, unknown := commandRefusals(ctx, r, keyPrefix)
	var problems []string
	var keys, channels []string
	for _, c := range slices.Sorted(maps.Keys(refused)) {
		msg := refused[c]
		switch {
		case strings.Contains(msg, "of the keys"):
			keys = append(keys, c)
			delete(refused, c)
		case strings.Contains(msg, "channel"):
			channels = append(channels, c)
			delete(refused, c)
		case optionalCommands[c] != "":
			warnings = append(warnings, fmt.Sprintf("masters[%d] (%s): the ACL user may not run %s (%s): %s", i, addr, strings.ToUpper(c), msg, optionalCommands[c]))
			delete(refused, c)
		}
	}
	const fix = "give it the ACL line in docs/operations.md (TLS)"
	if len(refused) > 0 {
		names := slices.Sorted(maps.Keys(refused))
		problems = append(problems, fmt.Sprintf("the ACL user may not run %s (%s): %s", upperList(names), refused[names[0]], fix))
	}
	if len(keys) > 0 {
		problems = append(problems, fmt.Sprintf("the ACL user may not use the keys under key_prefix %q (%s refused): %s, with ~%s* as its key pattern", keyPrefix, upperList(keys), fix, keyPrefix))
	}
	if len(channels) > 0 {
		problems = append(problems, fmt.Sprintf("the ACL user may not use the release channel %q (%s refused): %s, with &%s* as its channel pattern", redlock.ReleaseChannel(keyPrefix+"marker"), upperList(channels), fix, keyPrefix))
	}
	if len(unknown) > 0 {
		names := slices.Sorted(maps.Keys(unknown))
		problems = append(problems, fmt.Sprintf("it does not know %s (%s): redlockd needs Redis 7.0 or later", upperList(names), unknown[names[0]]))
	}
	return strings.Join(problems, "; "), warnings
}

// commandRefusals runs the checks of commandProblem on one master and
// returns, by lower-case command name ("script|load" for SCRIPT LOAD,
// "subscribe" for the channel), the first error of each call refused by
// the ACL (a command, key or channel refusal), and of each command the
// master does not know. Any other error (a timeout, the master going
// away, OOM) is not a refusal and is left to the daemon's own calls.
func commandRefusals(ctx context.Context, r *redis.Client, keyPrefix string) (refused, unknown map[string]string) {
	refused, unknown = map[string]string{}, map[string]string{}
	note := func(name string, err error) {
		if err == nil {
			return
		}
		msg := err.Error()
		switch {
		case strings.HasPrefix(msg, "NOPERM"), strings.Contains(msg, "executing the script can't"):
			// Redis 7.0 words a refusal inside a script "ERR The user
			// executing the script can't run this command or subcommand"
			// (or "… can't publish to the channel …", "… can't access at
			// least one of the keys …"), and one outside it "NOPERM …".
			if _, ok := refused[name]; !ok {
				refused[name] = msg
			}
		case strings.Contains(strings.ToLower(msg), "unknown command"), strings.Contains(strings.ToLower(msg), "unknown redis command"):
			if _, ok := unknown[name]; !ok {
				unknown[name] = msg
			}
		}
	}
	// The batch reading asks one bare INFO of two sections (redlock
	// batchstats.go).
	note("info", r.Info(ctx, "server", "stats").Err())
	sha, err := r.ScriptLoad(ctx, "return 1").Result()
	note("script|load", err)
	if err == nil {
		note("evalsha", r.EvalSha(ctx, sha, nil).Err())
	}
	channel := redlock.ReleaseChannel(keyPrefix + "marker")
	var id [8]byte
	_, _ = rand.Read(id[:])
	scratch := keyPrefix + "acl-check:" + hex.EncodeToString(id[:])
	out, err := r.Eval(ctx, commandCheckLua, []string{scratch + ":s", scratch + ":h", scratch + ":z"},
		channel, strconv.FormatInt(time.Now().Add(10*time.Second).UnixMilli(), 10)).Text()
	note("eval", err)
	if err == nil && out != "" {
		for line := range strings.SplitSeq(out, "\n") {
			name, msg, _ := strings.Cut(line, "\t")
			note(strings.ToLower(name), errors.New(msg))
		}
	}
	ps := r.Subscribe(ctx, channel)
	_, err = ps.Receive(ctx)
	note("subscribe", err)
	_ = ps.Close()
	return refused, unknown
}

// upperList is names in upper case, comma-separated.
func upperList(names []string) string {
	up := make([]string, len(names))
	for i, n := range names {
		up[i] = strings.ToUpper(n)
	}
	return strings.Join(up, ", ")
}
