package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeScript stores ARGV[1] bytes under KEYS[1] for 2s: the call in the
// middle of a batch that pushes a master over maxmemory.
var writeScript = redis.NewScript("redis.call('SET', KEYS[1], string.rep('x', tonumber(ARGV[1])), 'PX', 2000) return 1")

// TestBatchReadingCatchesEvictionBetweenVotes: the vote scripts no longer
// read INFO; one reading after the batch judges every vote in it. One
// pipeline carries a status vote, a write that takes master 4 over
// maxmemory, and a second status vote: the master evicts before running
// the second vote, after the first one ran. Neither vote's script read
// evicted_keys, and the reading after the batch refuses both; the first
// vote is refused for an eviction that happened after it ran (the safe
// side: a reading in its own script would have passed it). The negative
// control, the same batch with a small write, passes both votes; and the
// same replies without a reading are refused (fail closed). Both forms of
// the reading are run: one INFO server stats command (what a master that
// reports server_time_usec gets) and stats_read.lua (older masters).
func TestBatchReadingCatchesEvictionBetweenVotes(t *testing.T) {
	forEachReadingForm(t, testBatchReadingCatchesEviction)
}

// forEachReadingForm runs test as a subtest for each form of the batch
// reading: one INFO server stats command (bare), what the test masters
// (Redis 7.0) get, and stats_read.lua, what older masters get.
func forEachReadingForm(t *testing.T, test func(t *testing.T, bare bool)) {
	for _, form := range []struct {
		name string
		bare bool
	}{{"INFO server stats", true}, {"stats_read.lua", false}} {
		t.Run(form.name, func(t *testing.T) { test(t, form.bare) })
	}
}

// useReadingForm makes c's lanes read with the given form, pinned: a
// connection dialled later (a release still in flight when the quorum
// answered) does not set it back. The one-command form only where the
// masters answer it (Redis 7.0 and later), else the test is skipped.
func useReadingForm(t *testing.T, c *Client, bare bool) {
	t.Helper()
	works := bareReadingWorks(direct(t)[0].Do(context.Background(), "info", "server", "stats"))
	if bare && !works {
		t.Skip("the masters do not answer INFO server stats with server_time_usec (Redis before 7.0)")
	}
	for _, m := range c.masters {
		m.bareReadingPinned.Store(true)
		m.bareReading.Store(bare)
	}
}

// quietDeployment returns a Client of a brand-new deployment that probes
// hourly, with every master counting, and nothing else of the test's
// probing the masters: the Client that wrote the deployment is closed.
// Its probes, every 50ms, raise a fencing counter that lags with an
// EVALSHA (spreadFence: a master whose warm-up vote answered after the
// quorum gets no write-back), and one landed between the two commandstats
// readings of TestBatchReadingCatchesEvictionBetweenVotes (CI of stop 55:
// 5 EVALSHA counted for the 4 sent; lowering master 4's counter there
// reproduces it every time).
func quietDeployment(t *testing.T) *Client {
	t.Helper()
	first, opts := brandNewClient(t)
	require.NoError(t, first.Close())
	slow := sameDeployment(t, append(opts, WithHealthInterval(time.Hour))...)
	until(t, 10*time.Second, func() bool { return allCounting(slow) }, func() string { return fmt.Sprintf("%v", states(slow)) })
	return slow
}

func testBatchReadingCatchesEviction(t *testing.T, bare bool) {
	ctx := context.Background()
	slow := quietDeployment(t)
	r := direct(t)[4]
	require.NoError(t, writeScript.Load(ctx, r).Err()) // no NOSCRIPT retry in the middle of the batch
	m := slow.masters[4]
	useReadingForm(t, slow, bare)
	evalsha := func() int64 {
		return parseCommandCalls(t, r.Info(ctx, "commandstats").Val(), "evalsha")
	}
	key := newKey(t)
	filler := key + ":filler"
	t.Cleanup(func() {
		r.ConfigSet(ctx, "maxmemory", "0")
		r.ConfigSet(ctx, "maxmemory-policy", "noeviction")
		r.Del(ctx, filler)
	})

	batch := func(size int) []reply {
		deadline := time.Now().Add(time.Minute).UnixNano()
		keys := slow.voteKeys(key)
		calls := []*call{
			{script: slow.sc.status, keys: keys, deadline: deadline, idx: 4},
			{script: writeScript, keys: []string{filler}, args: []any{strconv.Itoa(size)}, deadline: deadline, idx: 4},
			{script: slow.sc.status, keys: keys, deadline: deadline, idx: 4},
		}
		fans := answeredBy(calls)
		m.lanes[0].exec(calls)
		var votes []reply
		for _, f := range fans {
			rep := answerOf(t, f, 4)
			require.NoError(t, rep.err)
			if _, ok := parseVote(rep.val); ok {
				votes = append(votes, rep)
			}
		}
		require.Len(t, votes, 2)
		return votes
	}
	judge := func(votes []reply) []error {
		var errs []error
		for _, rep := range votes {
			v, ok := parseVote(rep.val)
			require.True(t, ok, "%v", rep.val)
			errs = append(errs, m.checkVote(v, rep))
		}
		return errs
	}

	warmUp(slow) // fresh clock readings and eviction baseline
	dialAgain(t, m)
	before := evalsha()
	votes := batch(1 << 10)
	// The form asked for is the one sent: two status votes and a write are
	// three EVALSHA, and the script reading a fourth.
	sent := int64(3)
	if !bare {
		sent = 4
	}
	assert.Equal(t, sent, evalsha()-before, "EVALSHA calls on master 4 for one batch")
	for _, rep := range votes {
		assert.True(t, rep.stats.ok, "the lane read the statistics after the batch")
	}
	assert.Equal(t, []error{nil, nil}, judge(votes), "negative control: no eviction, both votes count")
	for i := range votes {
		votes[i].stats = statsReading{}
	}
	for _, err := range judge(votes) {
		assert.ErrorIs(t, err, errNoStatsReading, "no reading after the batch: the vote is refused")
	}

	warmUp(slow)
	evicted := func() int64 {
		n, err := strconv.ParseInt(parseInfoFields(r.Info(ctx, "stats").Val(), "evicted_keys")["evicted_keys"], 10, 64)
		require.NoError(t, err)
		return n
	}
	evictedBefore := evicted()
	used, err := strconv.ParseInt(parseInfoFields(r.Info(ctx, "memory").Val(), "used_memory")["used_memory"], 10, 64)
	require.NoError(t, err)
	require.NoError(t, r.ConfigSet(ctx, "maxmemory-policy", "volatile-ttl").Err())
	require.NoError(t, r.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+4<<20, 10)).Err())
	votes = batch(16 << 20)
	require.NoError(t, r.ConfigSet(ctx, "maxmemory", "0").Err())
	require.Greater(t, evicted(), evictedBefore, "the master evicted during the batch")
	require.True(t, votes[0].stats.ok && votes[1].stats.ok)
	assert.Equal(t, votes[0].stats, votes[1].stats, "one reading for the whole batch")
	for i, err := range judge(votes) {
		assert.ErrorIs(t, err, ErrMasterDataLost, "vote %d: the reading after the batch shows the eviction", i)
	}
	assert.Equal(t, int64(1), slow.DataLosses()[LossEvicted], "the eviction is counted once")
}

// dialAgain makes m's pool dial a new connection (one more held at once
// than it has idle): its onConnect runs after the test chose the reading
// form, as a connection dialled in the middle of a test by a release
// still in flight would.
func dialAgain(t *testing.T, m *master) {
	t.Helper()
	ctx := context.Background()
	stats := m.rdb.Load().PoolStats()
	before := stats.TotalConns
	var held []*redis.Conn
	for range stats.IdleConns + 1 {
		cn := m.rdb.Load().Conn()
		require.NoError(t, cn.Ping(ctx).Err())
		held = append(held, cn)
	}
	for _, cn := range held {
		require.NoError(t, cn.Close())
	}
	require.Greater(t, m.rdb.Load().PoolStats().TotalConns, before, "a new connection was dialled")
}

// parseCommandCalls returns the calls= count of one command in an INFO
// commandstats text (0 when absent).
func parseCommandCalls(t *testing.T, info, command string) int64 {
	t.Helper()
	v, ok := parseInfoFields(info, "cmdstat_"+command)["cmdstat_"+command]
	if !ok {
		return 0
	}
	for field := range strings.SplitSeq(v, ",") {
		if n, ok := strings.CutPrefix(field, "calls="); ok {
			calls, err := strconv.ParseInt(n, 10, 64)
			require.NoError(t, err)
			return calls
		}
	}
	t.Fatalf("no calls= in %q", v)
	return 0
}

// TestBareReadingTimesEachCommand: the property the one-command reading
// rests on (batchstats.go), on the masters the tests run. Thirty INFO
// server stats in one pipeline, one connection: each reply's
// server_time_usec is the time of its own command (strictly increasing,
// not one cached time per event-loop pass), and total_commands_processed
// grows with them: time and count are read in one step.
func TestBareReadingTimesEachCommand(t *testing.T) {
	ctx := context.Background()
	r := direct(t)[0]
	if !bareReadingWorks(r.Do(ctx, "info", "server", "stats")) {
		t.Skip("the test masters are older than Redis 7.0: the one-command reading is not used on them")
	}
	pipe := r.Pipeline()
	cmds := make([]*redis.Cmd, 30)
	for i := range cmds {
		cmds[i] = queueStatsReading(ctx, pipe, false, true)
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	var prev statsReading
	var prevUsec int64
	for i, cmd := range cmds {
		got := parseStatsReading(cmd)
		require.True(t, got.ok, "reading %d parses: %v", i, cmd.Val())
		text, _ := cmd.Val().(string)
		usec := infoField(text, "server_time_usec:")
		assert.Equal(t, time.UnixMicro(usec), got.at, "reading %d: its time is the master's server_time_usec", i)
		if i > 0 {
			assert.Greater(t, usec, prevUsec, "reading %d: the master timed it apart from the one before", i)
			assert.Greater(t, got.commands, prev.commands, "reading %d", i)
		}
		prev, prevUsec = got, usec
	}
	// The same master's script reading: a TIME within the same seconds.
	pipe = r.Pipeline()
	script := queueStatsReading(ctx, pipe, true, false)
	_, err = pipe.Exec(ctx)
	require.NoError(t, err)
	sr := parseStatsReading(script)
	require.True(t, sr.ok)
	assert.WithinDuration(t, prev.at, sr.at, time.Second, "both forms read the master's wall clock")
	assert.GreaterOrEqual(t, sr.commands, prev.commands)
	// A server without server_time_usec (before 6.2) answers without it.
	before62 := redis.NewCmd(ctx)
	before62.SetVal("# Server\r\nredis_version:6.0.16\r\nrun_id:abc\r\n\r\n# Stats\r\ntotal_commands_processed:9\r\nevicted_keys:0\r\n")
	assert.False(t, bareReadingWorks(before62), "a server without server_time_usec keeps the script")
	// Redis 6.2 has the field but refuses INFO with two sections.
	refused := redis.NewCmd(ctx)
	refused.SetErr(errors.New("ERR syntax error"))
	assert.False(t, bareReadingWorks(refused), "a refused one-command reading keeps the script")
	pipe = r.Pipeline()
	tried := queueStatsReading(ctx, pipe, false, true)
	_, err = pipe.Exec(ctx)
	require.NoError(t, err)
	assert.True(t, bareReadingWorks(tried), "the test masters answer it")
}

// TestParseStatsReading: the reply of stats_read.lua is decoded, and
// anything else leaves it unusable (its votes are refused).
func TestParseStatsReading(t *testing.T) {
	ok := func(v any) statsReading {
		cmd := redis.NewCmd(context.Background())
		cmd.SetVal(v)
		return parseStatsReading(cmd)
	}
	info := "# Stats\r\ntotal_connections_received:3\r\ntotal_commands_processed:1234\r\nevicted_keys:7\r\n"
	r := ok([]any{"1700000000", "250", info})
	require.True(t, r.ok)
	assert.Equal(t, int64(7), r.evicted)
	assert.Equal(t, int64(1234), r.commands)
	assert.Equal(t, time.Unix(1700000000, 250000), r.at)
	// A field whose name ends like a wanted one is not it; the first line
	// of the text is read too.
	r = ok([]any{"1700000000", "250", "evicted_keys:2\r\nx_total_commands_processed:9\r\ntotal_commands_processed:10\r\nexpired_evicted_keys:5\r\n"})
	require.True(t, r.ok)
	assert.Equal(t, int64(2), r.evicted)
	assert.Equal(t, int64(10), r.commands)

	for name, v := range map[string]any{
		"no evicted_keys":   []any{"1700000000", "250", "total_commands_processed:1234\r\n"},
		"only a look-alike": []any{"1700000000", "250", "total_commands_processed:1234\r\nx_evicted_keys:3\r\n"},
		"no commands":       []any{"1700000000", "250", "evicted_keys:7\r\n"},
		"garbled count":     []any{"1700000000", "250", "evicted_keys:x\r\ntotal_commands_processed:1234\r\n"},
		"no time":           []any{info},
		"zero time":         []any{"0", "0", info},
		"bad time":          []any{"x", "0", info},
		"neither form":      "OK",
		"INFO without time": "# Server\r\nrun_id:x\r\n" + info,
		"INFO zero time":    "# Server\r\nserver_time_usec:0\r\n" + info,
		"no text":           []any{"1700000000", "250", int64(3)},
	} {
		assert.False(t, ok(v).ok, name)
	}
	// The one-command form: INFO server stats, its time server_time_usec.
	r = ok("# Server\r\nredis_version:7.0.15\r\nserver_time_usec:1700000000000250\r\nuptime_in_seconds:9\r\n\r\n" + info)
	require.True(t, r.ok)
	assert.Equal(t, int64(7), r.evicted)
	assert.Equal(t, int64(1234), r.commands)
	assert.Equal(t, time.Unix(1700000000, 250000), r.at)

	failed := redis.NewCmd(context.Background())
	failed.SetErr(redis.ErrClosed)
	assert.False(t, parseStatsReading(failed).ok, "failed reading")
	assert.False(t, parseStatsReading(nil).ok, "no reading")
}

// TestVotesAfterScriptFlush: after SCRIPT FLUSH every vote's EVALSHA
// fails with NOSCRIPT and is re-sent as EVAL in a second pipeline, after
// the first pipeline's statistics reading ran (here the reading script is
// still loaded, so that first reading succeeds). The re-sent votes carry
// a reading of their own, taken after them (by the master's clock), and
// count; then a whole acquire after a flush of every master succeeds.
func TestVotesAfterScriptFlush(t *testing.T) {
	ctx := context.Background()
	slow := quietDeployment(t)
	m := slow.masters[4]
	r := direct(t)[4]
	key := newKey(t)
	warmUp(slow)
	require.NoError(t, r.ScriptFlush(ctx).Err())
	require.NoError(t, statsReadScript.Load(ctx, r).Err())
	deadline := time.Now().Add(time.Minute).UnixNano()
	calls := []*call{
		{script: slow.sc.status, keys: slow.voteKeys(key), deadline: deadline, idx: 4},
		{script: slow.sc.status, keys: slow.voteKeys(key), deadline: deadline, idx: 4},
	}
	fans := answeredBy(calls)
	m.lanes[0].exec(calls)
	for _, f := range fans {
		rep := answerOf(t, f, 4)
		require.NoError(t, rep.err)
		v, ok := parseVote(rep.val)
		require.True(t, ok)
		require.True(t, rep.stats.ok)
		assert.False(t, rep.stats.at.Before(v.time), "the reading ran after the re-sent vote: %v < %v", rep.stats.at, v.time)
		assert.NoError(t, m.checkVote(v, rep))
	}

	for _, r := range direct(t) {
		require.NoError(t, r.ScriptFlush(ctx).Err())
	}
	lock, err := slow.Acquire(ctx, key, 5*time.Second, WithRetry(NoRetry()))
	require.NoError(t, err, "the re-sent votes count")
	require.NoError(t, lock.Release(ctx))
}

// TestStatusVoteReadUnderOOM: a master over maxmemory (noeviction) still
// answers status votes, and their batch reading (a MULTI around TIME and
// INFO would be refused there, and the votes with it). Negative control:
// the same master refuses a write.
func TestStatusVoteReadUnderOOM(t *testing.T) {
	ctx := context.Background()
	slow := quietDeployment(t)
	m := slow.masters[4]
	r := direct(t)[4]
	key := newKey(t)
	warmUp(slow)
	require.NoError(t, r.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, r.ConfigSet(ctx, "maxmemory", "1").Err())
	t.Cleanup(func() { r.ConfigSet(ctx, "maxmemory", "0") })
	require.ErrorContains(t, r.Set(ctx, key+":x", "x", time.Second).Err(), "OOM", "negative control: the master is out of memory")
	v, rep := statusVote(t, slow, 4, key)
	assert.True(t, rep.stats.ok, "the batch reading runs under OOM")
	assert.NoError(t, m.checkVote(v, rep))
}

// statusVote sends one status vote for key to master idx of c straight
// through its first lane, and returns its parsed answer and the reply
// (not judged).
func statusVote(t *testing.T, c *Client, idx int, key string) (voteReply, reply) {
	t.Helper()
	calls := []*call{{script: c.sc.status, keys: c.voteKeys(key), deadline: time.Now().Add(time.Minute).UnixNano(), idx: int32(idx)}}
	fans := answeredBy(calls)
	c.masters[idx].lanes[0].exec(calls)
	rep := answerOf(t, fans[0], idx)
	require.NoError(t, rep.err)
	v, ok := parseVote(rep.val)
	require.True(t, ok, "%v", rep.val)
	return v, rep
}

// answeredBy gives each of calls, sent to one master straight through its
// lane (exec), a fan-out of its own to answer.
func answeredBy(calls []*call) []*fan {
	fans := make([]*fan, len(calls))
	for i, c := range calls {
		fans[i] = makeFan(int(c.idx) + 1)
		c.out = fans[i]
	}
	return fans
}

// answerOf is master idx's answer in f, which exec has delivered.
func answerOf(t *testing.T, f *fan, idx int) reply {
	t.Helper()
	r, ok := f.answer(idx)
	require.True(t, ok, "master %d answered", idx)
	return r
}
