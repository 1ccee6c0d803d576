package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/config"
)

// TestLoggerStackTraces: an operational error (a refused reload, say) is
// logged without a stack trace in either format; a DPanic, a bug, keeps one.
func TestLoggerStackTraces(t *testing.T) {
	for _, format := range []string{"json", "console"} {
		t.Run(format, func(t *testing.T) {
			zc, err := loggerConfig(config.Config{LogFormat: format, LogLevel: "info"})
			require.NoError(t, err)
			file := filepath.Join(t.TempDir(), "log")
			zc.OutputPaths = []string{file}
			zc.Development = false // a DPanic logs instead of panicking
			log, err := buildLogger(zc)
			require.NoError(t, err)
			log.Error("reload refused: the configuration does not load; the old one stays in force")
			log.Warn("master down")
			require.NoError(t, log.Sync())
			raw, err := os.ReadFile(file)
			require.NoError(t, err)
			// A stack trace names the test function; the caller field does not.
			assert.NotContains(t, string(raw), "TestLoggerStackTraces", "no stack trace for an error or a warning:\n%s", raw)

			log.DPanic("a bug")
			require.NoError(t, log.Sync())
			raw, err = os.ReadFile(file)
			require.NoError(t, err)
			assert.Contains(t, string(raw), "TestLoggerStackTraces", "a DPanic keeps its stack trace:\n%s", raw)
		})
	}
}
