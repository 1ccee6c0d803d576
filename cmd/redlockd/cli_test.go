package main

import (
	"bytes"
	"context"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

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
