package redlock

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The INFO statistics of a vote, read once per pipelined batch.
//
// A vote is refused when its master evicted keys since it was last known
// intact (evicted_keys grew), or when its statistics were reset
// (total_commands_processed went down: a CONFIG RESETSTAT, which also
// resets evicted_keys and so could hide evictions). The vote scripts used
// to read INFO stats themselves, once per vote; INFO inside a script costs
// the master about as much CPU as the rest of the vote. Instead, a lane
// whose pipeline carries at least one vote script appends one reading
// after the batch's calls, on the same pipeline: a small script that
// returns the master's TIME and INFO stats (scripts/stats_read.lua), and
// every vote of the batch is judged (evictionsUnchanged, commandsGrow)
// against that reading, as it was against its own.
//
// Claim: a vote judged against its batch reading is refused whenever an
// eviction before it would have got it refused against a reading of its
// own, taken in its script.
//
// Proof: the pipeline goes out on one connection, and Redis runs one
// connection's commands in the order they were sent, each to completion
// (a script atomically), so the reading runs after every vote
// script of its batch. A NOSCRIPT retry (retryNoScript) re-sends votes in a
// later pipeline, sent after the first one's answers arrived; it carries a
// reading of its own, which then replaces the first one for the whole
// batch; so does a reading that itself met NOSCRIPT. Both counters only
// ever grow within one server process, except:
//   - a restart (a new process, whose counts start from zero): its run_id
//     is read on every new connection before any command (onConnect), so
//     a restart is seen before a vote or reading of the new process is
//     judged (statsRestarted), as before;
//   - CONFIG RESETSTAT: both counts drop to zero. evicted_keys cannot
//     grow past its baseline again without a new eviction (itself a
//     loss); total_commands_processed is refilled by traffic, and a
//     reading shows the reset only while the count is still below the
//     last reading before it (commandsGrow). That check was a heuristic
//     per vote too (granted.go: traffic refills the count), and is not
//     claimed exact here: the batch reading takes it once per batch, at
//     most the rest of one batch (≤ maxBatch calls on this connection,
//     plus what other connections ran in the same interval) after the
//     first vote that followed the reset, against a count to refill that
//     is everything the master ran before the reset.
//
// So let e be an eviction (or a reset) on a master, and V a vote of a
// batch B whose reading is R. If e happened before V ran, it happened
// before R ran, and R shows it (evicted_keys above the baseline, or a
// count below the last one): V is refused, exactly as a reading in V's
// script would have refused it. If e happened after V ran, V's own
// reading would not have shown it either; R may (e before R): then V is
// refused although its own reading would have passed it — the safe side,
// and the next batch would have seen e anyway. A vote is never counted
// before its batch's reading is parsed and judged: both arrive in the same
// round trip, and the lane delivers a vote only with its reading attached
// (reply.stats). A batch whose reading failed, is missing or cannot be
// parsed delivers its votes without one (stats.ok false), and checkVote
// refuses them: no vote counts without a reading taken after it.
//
// The commands counter of different lanes' readings is compared by the
// master's time read in the same atomic step as the count, never by the
// votes' times: a reading with a later time has a count at least as high
// unless the statistics were reset in between (commandsGrow).
//
// Two forms of the reading, chosen per master on each new connection
// (onConnect), by sending the first form once and parsing its answer:
//   - one bare INFO server stats command, where it is answered with
//     server_time_usec in it (Redis 7.0 and later: the field came with 6.2,
//     redis/redis#8132, INFO with several sections with 7.0,
//     redis/redis#6891; 6.2 answers a syntax error). The field is
//     server.ustime, which every version that has it sets at the start of
//     each top-level command (server.c: call(), or enterExecutionUnit
//     from 7.2), and total_commands_processed is in the same reply; one
//     command runs to completion before any other, so the time and the
//     count are one atomic step, as in the script.
//     TestBareReadingTimesEachCommand checks that property on the masters
//     the tests run;
//   - elsewhere, scripts/stats_read.lua: TIME and INFO stats in one script.
// A reading that fails or lacks a field (the first batch on a connection
// to a server that replaced the master after the last check, say) cannot
// be parsed: its batch's votes are refused, as for any failed reading; the
// new connection's check switches the form for the next batch.
//
// Why not MULTI; TIME; INFO stats; EXEC: a master over maxmemory refuses
// every command queued in a MULTI, so status votes, which succeed under
// OOM, would lose their reading and be refused. INFO and the script (no
// shebang, no writes) run under OOM as the status script does.
//
// Cost, measured on a master with INFO cpu (redis 7.0, this machine):
// the script 6.1–7.7 µs per reading 16 deep, the bare INFO server stats
// 3.8–4.9; at c=1, where each batch is one vote and the master wakes for
// each, the script cost about 15 µs per reading (SLOWLOG). Alternating
// runs of the library's cycles/s did not resolve the difference from
// this machine's spread (docs/performance-history.md, fifteenth session). Either
// reply is the whole INFO text (about 1.5 KB for stats, 2.5 KB with
// server); only the fields needed are parsed, here.

// statsReading is one batch's reading of a master's INFO statistics,
// taken after every vote of the batch.
type statsReading struct {
	at       time.Time // the master's time, read in the same atomic step
	evicted  int64     // INFO stats evicted_keys
	commands int64     // INFO stats total_commands_processed
	ok       bool      // false: no reading (failed, missing, unparsable): the batch's votes are refused
}

// queueStatsReading appends the batch reading to pipe: with bare, one
// INFO server stats command; otherwise stats_read.lua, as EVALSHA, or as
// EVAL when retrying a NOSCRIPT (eval).
func queueStatsReading(ctx context.Context, pipe redis.Pipeliner, eval, bare bool) *redis.Cmd {
	switch {
	case bare:
		cmd := redis.NewCmd(ctx, "info", "server", "stats")
		_ = pipe.Process(ctx, cmd)
		return cmd
	case eval:
		return statsReadScript.Eval(ctx, pipe, nil)
	}
	return statsReadScript.EvalSha(ctx, pipe, nil)
}

// parseStatsReading decodes either form of the reading: the INFO server
// stats text (its time is server_time_usec), or stats_read.lua's {sec,
// usec, INFO stats text}. Any failure leaves ok false.
func parseStatsReading(cmd *redis.Cmd) statsReading {
	if cmd == nil || cmd.Err() != nil {
		return statsReading{}
	}
	var at time.Time
	var info string
	switch v := cmd.Val().(type) {
	case string:
		us := infoField(v, "server_time_usec:")
		if us <= 0 {
			return statsReading{}
		}
		at, info = time.UnixMicro(us), v
	case []any:
		if len(v) != 3 {
			return statsReading{}
		}
		sec, err1 := anyInt(v[0])
		usec, err2 := anyInt(v[1])
		text, ok := v[2].(string)
		if err1 != nil || err2 != nil || !ok || sec <= 0 {
			return statsReading{}
		}
		at, info = time.Unix(sec, usec*int64(time.Microsecond)), text
	default:
		return statsReading{}
	}
	r := statsReading{at: at, evicted: infoField(info, "evicted_keys:"), commands: infoField(info, "total_commands_processed:")}
	r.ok = r.evicted >= 0 && r.commands >= 0
	return r
}

// bareReadingWorks reports whether a one-command reading sent on a new
// connection (INFO server stats) was answered and parses, its time
// server_time_usec included: servers before 6.2 have no such field, and
// 6.2 has it but answers INFO with more than one section with a syntax
// error (several sections came with 7.0, redis/redis#6891).
func bareReadingWorks(cmd *redis.Cmd) bool {
	return parseStatsReading(cmd).ok
}

// infoField returns the value of the INFO field whose line starts with
// prefix ("name:"), or -1 when it is missing or not a whole number. It looks the line up
// instead of splitting the whole text: a batch reading is about 40 lines,
// of which two are needed.
func infoField(info, prefix string) int64 {
	for rest := info; ; {
		i := strings.Index(rest, prefix)
		if i < 0 {
			return -1
		}
		if i > 0 && rest[i-1] != '\n' {
			rest = rest[i+len(prefix):] // a longer field's tail, e.g. "xevicted_keys:"
			continue
		}
		v := rest[i+len(prefix):]
		if end := strings.IndexByte(v, '\n'); end >= 0 {
			v = v[:end]
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return -1
		}
		return n
	}
}

func anyInt(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case string:
		return strconv.ParseInt(x, 10, 64)
	}
	return 0, strconv.ErrSyntax
}
