package main

import (
	"context"
	"errors"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/redisproc"
)

// TestMasterCommandsCheckedAtStartup: a master whose ACL user lacks one
// command the daemon runs (in a script or not), its keys or its release
// channel is named at startup, with what is missing, for each member of
// that class; SCAN, which only the listings need, is a warning. The
// documented line passes with neither (the negative control), and `serve`
// against a master missing a command exits 1 naming it instead of
// starting with every vote on that master failing NOPERM.
func TestMasterCommandsCheckedAtStartup(t *testing.T) {
	dir := t.TempDir()
	m := startACLMasters(t, dir, 3, "redlockd-master-password-0123")
	line := strings.Fields(strings.Replace(readmeACLLine(t), ">CHANGE-ME-master-password", ">"+m.password, 1))
	require.Equal(t, []string{"user", "redlockd", "on"}, line[:3])
	ctx := context.Background()
	// setUser gives master 0's redlockd user the documented line with
	// extra rules after it (later rules win).
	setUser := func(extra ...string) {
		t.Helper()
		r := m.adminClient(0)
		defer r.Close()
		args := []any{"ACL", "SETUSER", "redlockd", "reset"}
		for _, f := range append(line[2:], extra...) {
			args = append(args, f)
		}
		require.NoError(t, r.Do(ctx, args...).Err())
	}
	opts := make([]*redis.Options, len(m.servers))
	for i, s := range m.servers {
		opts[i] = &redis.Options{Addr: s.Addr(), Username: "redlockd", Password: m.password, TLSConfig: m.admin.Clone()}
	}
	prefix := "redlock:"
	first := "masters[0] (" + m.servers[0].Addr() + "): "

	setUser()
	warnings, err := checkMasterAccess(ctx, opts, nil, prefix)
	require.NoError(t, err, "the documented line")
	assert.Empty(t, warnings)

	for _, tc := range []struct {
		rules []string
		want  string
	}{
		{[]string{"-pexpiretime"}, "the ACL user may not run PEXPIRETIME"},
		{[]string{"-pexpireat", "-zscore"}, "the ACL user may not run PEXPIREAT, ZSCORE"},
		{[]string{"-mget"}, "may not run MGET"},
		{[]string{"-hset"}, "may not run HSET"},
		{[]string{"-publish"}, "may not run PUBLISH"},
		{[]string{"-time"}, "may not run TIME"},
		{[]string{"-evalsha"}, "may not run EVALSHA"},
		{[]string{"-script|load"}, "may not run SCRIPT|LOAD"},
		{[]string{"-info"}, "may not run INFO"},
		{[]string{"-subscribe"}, "may not run SUBSCRIBE"},
		{[]string{"-eval"}, "may not run EVAL ("},
		{[]string{"resetkeys", "~other:*"}, `may not use the keys under key_prefix "redlock:" (`},
		{[]string{"resetchannels", "&other:*"}, `may not use the release channel "redlock:marker:released:v2" (PUBLISH, SUBSCRIBE refused)`},
	} {
		t.Run(strings.Join(tc.rules, " "), func(t *testing.T) {
			setUser(tc.rules...)
			_, err := checkMasterAccess(ctx, opts, nil, prefix)
			require.Error(t, err)
			assert.Contains(t, err.Error(), first+"the ACL user may not")
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "give it the ACL line in docs/operations.md (TLS)")
			assert.NotContains(t, err.Error(), "masters[1]", "only master 0 lacks it")
			assert.NotContains(t, err.Error(), m.password)
		})
	}

	t.Run("SCAN is a warning", func(t *testing.T) {
		setUser("-scan")
		warnings, err := checkMasterAccess(ctx, opts, nil, prefix)
		require.NoError(t, err)
		require.Len(t, warnings, 1)
		assert.Contains(t, warnings[0], first+"the ACL user may not run SCAN")
		assert.Contains(t, warnings[0], "GET /admin/locks")
	})

	t.Run("serve stops at startup", func(t *testing.T) {
		setUser("-pexpiretime")
		path := m.config(t, t.TempDir(), nil)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(cctx, binary, "serve", "--config", path, "--listen", "127.0.0.1:0").CombinedOutput()
		require.NoError(t, cctx.Err(), "serve did not stop at once: %s", out)
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "serve exits with an error: %v\n%s", err, out)
		assert.Equal(t, 1, ee.ExitCode(), "%s", out)
		assert.Contains(t, string(out), first+"the ACL user may not run PEXPIRETIME")
	})

	// No scratch key is left on any master, whatever was refused.
	setUser()
	for i := range m.servers {
		r := m.adminClient(i)
		keys, err := r.Keys(ctx, prefix+"acl-check:*").Result()
		r.Close()
		require.NoError(t, err)
		assert.Empty(t, keys, "master %d", i)
	}
}

// TestMasterWithoutACommandNamedAtStartup: a master that does not know a
// command the scripts call (a Redis before 7.0 has no PEXPIRETIME; here
// renamed away) is named with the version needed; the other masters are
// not.
func TestMasterWithoutACommandNamedAtStartup(t *testing.T) {
	old, err := redisproc.Start(redisproc.Options{ExtraArgs: []string{"--rename-command", "PEXPIRETIME", ""}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, old.Stop()) })
	opts := []*redis.Options{{Addr: servers[0].Addr()}, {Addr: old.Addr()}, {Addr: servers[2].Addr()}}
	_, err = checkMasterAccess(context.Background(), opts, nil, "redlock:")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "masters[1] ("+old.Addr()+"): it does not know PEXPIRETIME (")
	assert.Contains(t, err.Error(), "redlockd needs Redis 7.0 or later")
	assert.NotContains(t, err.Error(), "masters[0]")
	assert.NotContains(t, err.Error(), "masters[2]")
}

// TestCommandCheckCoversEveryScriptCommand: the startup check
// (commandCheckLua) tries every command a script of this repository calls,
// as TestACLAllowsEveryScriptCommand scans them, so a script that starts
// using a new command is checked at startup too.
func TestCommandCheckCoversEveryScriptCommand(t *testing.T) {
	tried := map[string]bool{}
	for _, m := range regexp.MustCompile(`try\('([A-Z]+)'`).FindAllStringSubmatch(commandCheckLua, -1) {
		tried[m[1]] = true
	}
	require.True(t, tried["PEXPIRETIME"], "the check's commands were found")
	used := scriptCommands(t)
	require.Contains(t, used, "mget", "the scan found the scripts' commands")
	for cmd, files := range used {
		assert.True(t, tried[strings.ToUpper(cmd)], "%v call %s, which the startup check does not try", slices.Compact(slices.Sorted(slices.Values(files))), cmd)
	}
}
