package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/redlockd/redlockd/config"
)

// `redlockd` alone names every command, and the usage describes each.
func TestNoCommandListsEvery(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), nil, &stdout, &stderr)
	require.Error(t, err)
	for _, c := range commands {
		assert.Contains(t, err.Error(), c)
		assert.Contains(t, stderr.String(), "redlockd "+c)
	}
}

func TestVersion(t *testing.T) {
	for _, arg := range []string{"version", "--version"} {
		var stdout bytes.Buffer
		require.NoError(t, run(context.Background(), []string{arg}, &stdout, &bytes.Buffer{}))
		assert.True(t, strings.HasPrefix(stdout.String(), "redlockd "), stdout.String())
		assert.Contains(t, stdout.String(), runtime.Version())
	}
	// From build information: the module version, the stamped revision
	// cut to 12 characters, whether the tree was modified.
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	assert.Equal(t, "redlockd v1.2.3 (revision 0123456789ab, modified) go1.26.8 "+runtime.GOOS+"/"+runtime.GOARCH, versionString(bi, true))
	bi.Settings = nil
	assert.Contains(t, versionString(bi, true), "(revision unknown)")
}

// The example config's CHANGE-ME key is warned about, by account, without
// the key; real keys are not.
func TestPlaceholderKeyWarning(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	warnPlaceholderKeys(zap.New(core), []config.APIKey{
		{Name: "shop", Key: "CHANGE-ME-shop-dev-key-0001"},
		{Name: "ok", Key: "0123456789abcdef0123456789abcdef"},
		{Name: "hashed", KeySHA256: strings.Repeat("ab", 32)},
	})
	all := logs.All()
	require.Len(t, all, 1)
	assert.Equal(t, zapcore.WarnLevel, all[0].Level)
	assert.Contains(t, all[0].Message, `account "shop"`)
	assert.NotContains(t, all[0].Message, "CHANGE-ME-shop")
	assert.Equal(t, "shop", all[0].ContextMap()["account"])
}

// repair-fences needs only the masters: no config file, no API key. Its
// help lists its own flags, not serve's, and a dry run's AFTER column
// shows what a repair would write.
func TestRepairFencesNeedsOnlyMasters(t *testing.T) {
	masters := make([]string, len(servers))
	for i, s := range servers {
		masters[i] = s.Addr()
	}
	t.Setenv("REDLOCKD_API_KEYS", "")
	var out, errOut bytes.Buffer
	// Without --max-ttl, and none registered on the masters: asked for
	// (the serve default, a day, once kept a newcomer's masters out for
	// a day, and a repair never shortens a quarantine).
	err := run(context.Background(), []string{"repair-fences", "--masters", strings.Join(masters, ","),
		"--key-prefix", "repairdry:", "--min", "41", "--dry-run"}, &out, &errOut)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "give --max-ttl SECONDS, the daemons' max_ttl: no client registered its max TTL")
	assert.Contains(t, err.Error(), "nothing written")
	out.Reset()
	err = run(context.Background(), []string{"repair-fences", "--masters", strings.Join(masters, ","),
		"--key-prefix", "repairdry:", "--min", "41", "--dry-run", "--max-ttl", "86400"}, &out, &errOut)
	require.NoError(t, err, "stderr: %s", &errOut)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.GreaterOrEqual(t, len(lines), 1+len(masters), out.String())
	assert.Contains(t, lines[0], "AFTER")
	target := "1000000" // max(highest 0 + margin 1,000,000, min 41 + 1)
	for _, l := range lines[1 : 1+len(masters)] {
		f := strings.Fields(l)
		require.GreaterOrEqual(t, len(f), 4, l)
		assert.Equal(t, "0", f[2], "BEFORE: %s", l)
		assert.Equal(t, target, f[3], "AFTER is the target: %s", l)
	}
	assert.Contains(t, out.String(), "would be raised to "+target)
	assert.Contains(t, out.String(), "masters that lost their data would stay out for 24h0m0s after the repair: the longer of max_ttl 24h0m0s and the longest max TTL registered on the masters",
		"the stay is said even when no client registered a longer max TTL")
	assert.Contains(t, out.String(), "each running daemon keeps them out at least its own max_ttl after the repair")

	// No master holds a counter under this prefix: without --min the
	// newest fence is unknown, and repair-fences refuses.
	err = run(context.Background(), []string{"repair-fences", "--masters", strings.Join(masters, ","),
		"--key-prefix", "repairdry:"}, &bytes.Buffer{}, &bytes.Buffer{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--min")
	assert.Contains(t, err.Error(), "it must be at least the highest fence any protected resource has accepted")
	assert.Contains(t, err.Error(), "a lower value sends fences backwards")
	assert.NotContains(t, err.Error(), "any value", "the message must not invite a guess")
	assert.Contains(t, err.Error(), "nothing written")

	var help bytes.Buffer
	require.ErrorIs(t, run(context.Background(), []string{"repair-fences", "--help"}, &bytes.Buffer{}, &help), flag.ErrHelp)
	assert.Contains(t, help.String(), "after the repair")
	usage, _, _ := strings.Cut(help.String(), "\n")
	assert.Equal(t, "Usage: redlockd repair-fences (--masters HOST:PORT,… | --config FILE) [--max-ttl SECONDS] [--min N] [--margin N] [--allow-missing] [--dry-run]", usage,
		"--masters alone is enough; --config is not required")
	assert.NotContains(t, help.String(), "since it restarted")
	for _, f := range []string{"-masters", "-key-prefix", "-max-ttl", "-min", "-margin", "-dry-run", "-allow-missing", "-config"} {
		assert.Contains(t, help.String(), f)
	}
	for _, f := range []string{"-listen", "-max-body-bytes", "-shutdown-timeout", "-drain-delay", "-log-level", "-default-ttl"} {
		assert.NotContains(t, help.String(), f)
	}

	// Bad masters are still refused, naming the field.
	err = run(context.Background(), []string{"repair-fences", "--masters", masters[0] + "," + masters[1]}, &bytes.Buffer{}, &bytes.Buffer{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "masters: 2 given")
	assert.NotContains(t, err.Error(), "api_keys")
}

// repair-fences names a master whose fencing counter is below the others'
// (it may have rolled back: the daemons keep every intact master's counter
// at the highest) and says it is quarantined like one that lost its data.
func TestRepairFencesNamesALaggingMaster(t *testing.T) {
	ctx := context.Background()
	prefix := "repairlag:" + t.Name() + ":"
	masters := make([]string, len(servers))
	for i, s := range servers {
		masters[i] = s.Addr()
		r := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		fence := "10"
		if i == 4 {
			fence = "7"
		}
		require.NoError(t, r.MSet(ctx, prefix+"marker", fmt.Sprintf("redlockd %d", time.Now().UnixMilli()), prefix+"marker:horizon", "0", prefix+"fence", fence).Err())
		require.NoError(t, r.Close())
	}
	var out, errOut bytes.Buffer
	require.NoError(t, run(ctx, []string{"repair-fences", "--masters", strings.Join(masters, ","), "--key-prefix", prefix, "--max-ttl", "1"}, &out, &errOut), errOut.String())
	assert.Contains(t, out.String(), "master 4 ("+masters[4]+") lost its data or may have (fencing counter 7 below the highest found, 10: it may have rolled back to an older copy of its data): quarantined like one that did")
	assert.Equal(t, 1, strings.Count(out.String(), "lost its data or may have"), out.String())
}

// `redlockd lock help` ends with where each subcommand's flags are, not
// an empty "Flags:" heading; a subcommand's --help lists its own.
func TestLockHelpFlags(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"lock", "help"}, &out, &bytes.Buffer{}))
	assert.False(t, strings.HasSuffix(strings.TrimSpace(out.String()), "Flags:"), "an empty Flags: heading ends the help:\n%s", &out)
	assert.Contains(t, out.String(), "redlockd lock SUBCOMMAND --help")

	var help bytes.Buffer
	require.ErrorIs(t, run(context.Background(), []string{"lock", "acquire", "--help"}, &bytes.Buffer{}, &help), flag.ErrHelp)
	assert.Contains(t, help.String(), "Flags of lock acquire:\n")
	assert.Contains(t, help.String(), "-ttl")
}

// seedDeployment writes an intact deployment's marker, lease horizon and
// fencing counter (10) under prefix on every test master, then calls more
// with a client of master i, and returns the masters' addresses.
func seedDeployment(t *testing.T, prefix string, more func(r *redis.Client, i int)) []string {
	t.Helper()
	masters := make([]string, len(servers))
	now := time.Now()
	for i, s := range servers {
		masters[i] = s.Addr()
		r := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
		require.NoError(t, r.MSet(context.Background(), prefix+"marker", fmt.Sprintf("redlockd %d", now.UnixMilli()), prefix+"marker:horizon", "0", prefix+"fence", "10").Err())
		more(r, i)
		require.NoError(t, r.Close())
	}
	return masters
}

// TestRepairFencesDryRunOnIntactMasters: a dry run on masters that all
// kept their data flags none, and says so rather than "masters that lost
// their data would stay out" (a black-box pass read that as a finding).
func TestRepairFencesDryRunOnIntactMasters(t *testing.T) {
	ctx := context.Background()
	prefix := "repairintact:" + t.Name() + ":"
	masters := seedDeployment(t, prefix, func(*redis.Client, int) {})
	var out, errOut bytes.Buffer
	require.NoError(t, run(ctx, []string{"repair-fences", "--masters", strings.Join(masters, ","), "--key-prefix", prefix, "--max-ttl", "60", "--dry-run"}, &out, &errOut), errOut.String())
	assert.Contains(t, out.String(), "every master read here kept its data, so this repair quarantines none; masters a running daemon holds out as repairing (GET /readyz) would stay out for 1m0s after the repair")
	assert.NotContains(t, out.String(), "masters that lost their data")
	assert.NotContains(t, out.String(), "would be quarantined")
}

// TestRepairFencesMaxTTL: without --max-ttl (nor a config file or
// REDLOCKD_MAX_TTL), repair-fences takes the longest max TTL the clients
// registered on the masters, and says so; a second run with a shorter one
// says that a master keeps the first run's longer stay (a repair never
// shortens a quarantine: a newcomer's second run printed "10m0s" while the
// masters stayed out a day).
func TestRepairFencesMaxTTL(t *testing.T) {
	ctx := context.Background()
	prefix := "repairttl:" + t.Name() + ":"
	now := time.Now()
	masters := seedDeployment(t, prefix, func(r *redis.Client, i int) {
		// A client with max TTL 7 s registered until a minute from now.
		require.NoError(t, r.ZAdd(ctx, prefix+"marker:max_ttl", redis.Z{Score: float64(now.Add(time.Minute).UnixMilli()), Member: "7000"}).Err())
		if i == 4 {
			require.NoError(t, r.Del(ctx, prefix+"marker").Err()) // master 4 lost its data
		}
	})
	var out, errOut bytes.Buffer
	require.NoError(t, run(ctx, []string{"repair-fences", "--masters", strings.Join(masters, ","), "--key-prefix", prefix}, &out, &errOut), errOut.String())
	assert.Contains(t, out.String(), "max TTL: 7s, the longest the clients registered on the masters (--max-ttl not given)")
	assert.Contains(t, out.String(), "masters that lost their data stay out for 7s after the repair")

	// Master 4 loses its data again and is repaired with a long max TTL;
	// a later run with a short one finds it intact (its repair marker is
	// there) and keeps that stay, and says so.
	r := redis.NewClient(&redis.Options{Addr: masters[4], MaxRetries: -1})
	require.NoError(t, r.Del(ctx, prefix+"marker").Err())
	require.NoError(t, r.Close())
	require.NoError(t, run(ctx, []string{"repair-fences", "--masters", strings.Join(masters, ","), "--key-prefix", prefix, "--max-ttl", "100"}, &out, &errOut), errOut.String())
	out.Reset()
	require.NoError(t, run(ctx, []string{"repair-fences", "--masters", strings.Join(masters, ","), "--key-prefix", prefix, "--max-ttl", "1"}, &out, &errOut), errOut.String())
	assert.Contains(t, out.String(), "master 4 ("+masters[4]+") stays out 1m", out.String())
	assert.Contains(t, out.String(), "after this repair: an earlier repair's quarantine ends later, and a repair never shortens one")
}

// A mistyped command or lock subcommand is one line on stderr, naming
// the nearest one, with exit 64 (a usage error), not the whole usage
// printed above the error.
func TestUnknownCommandSuggests(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"lock", "acquir"}, `lock: unknown subcommand "acquir" (did you mean "acquire"?); see redlockd lock --help`},
		{[]string{"lock", "stat"}, `lock: unknown subcommand "stat" (did you mean "status"?); see redlockd lock --help`},
		{[]string{"lock", "xyz"}, `lock: unknown subcommand "xyz"; see redlockd lock --help`},
		{[]string{"serv"}, `unknown command "serv" (did you mean "serve"?); see redlockd --help`},
		{[]string{"frobnicate"}, `unknown command "frobnicate"; see redlockd --help`},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), c.args, &stdout, &stderr)
		require.Error(t, err, "%v", c.args)
		assert.Equal(t, c.want, err.Error(), "%v", c.args)
		var ee *exitError
		require.ErrorAs(t, err, &ee, "%v", c.args)
		assert.Equal(t, exitUsage, ee.code, "%v", c.args)
		assert.Empty(t, stdout.String()+stderr.String(), "%v: no usage printed", c.args)
	}
}

// A flag given twice is refused (exit 64) instead of the last one winning
// in silence (--key a --key b locked b); the command's own arguments after
// -- are not flags of lock's.
func TestLockRepeatedFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"lock", "acquire", "--key", "a", "--key", "b"}, "lock acquire: --key given twice; give each flag once"},
		{[]string{"lock", "release", "--key", "a", "--token=t", "-token", "u"}, "lock release: --token given twice; give each flag once"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append(c.args, "--url", "http://127.0.0.1:1", "--api-key", "k"), &stdout, &stderr)
		require.Error(t, err, "%v", c.args)
		assert.Equal(t, c.want, err.Error())
		var ee *exitError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, exitUsage, ee.code)
	}
	assert.Equal(t, "", repeatedFlag(flagSetOf(t, "key", "ttl"), []string{"--key", "a", "--ttl", "5s", "--", "--key", "b"}), "after --: the command's")
	assert.Equal(t, "", repeatedFlag(flagSetOf(t, "key"), []string{"--key", "--key"}), "a value that looks like a flag is the value")
}

func flagSetOf(t *testing.T, names ...string) *flag.FlagSet {
	t.Helper()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	for _, n := range names {
		fs.String(n, "", "")
	}
	return fs
}
