package apitest

// The runnable examples/ against the real daemon on the five real masters:
// each holds a lock for longer than its TTL, is refused while another owner
// holds it, and (Go, Python, the cron line) is told or killed when the lock
// is lost.

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/testdaemon"
)

// repoRoot is the product module's directory, where examples/ lives.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/redlockd/redlockd").Output()
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}

// syncBuffer is a bytes.Buffer safe to read while a process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// example is one example process.
type example struct {
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
}

// startExample runs argv with the daemon's URL and API key in the
// environment and the redlockd binary on PATH.
func startExample(t *testing.T, d *testdaemon.Daemon, env []string, argv ...string) *example {
	t.Helper()
	e := &example{cmd: exec.Command(argv[0], argv[1:]...)}
	e.cmd.Dir = repoRoot(t)
	e.cmd.Env = append(os.Environ(),
		"REDLOCKD_URL="+d.URL,
		"REDLOCKD_API_KEY="+testdaemon.APIKey,
		"PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"),
	)
	e.cmd.Env = append(e.cmd.Env, env...)
	e.cmd.Stdout, e.cmd.Stderr = &e.stdout, &e.stderr
	require.NoError(t, e.cmd.Start())
	t.Cleanup(func() { _ = e.cmd.Process.Kill() })
	return e
}

func (e *example) wait(t *testing.T) int {
	t.Helper()
	code, err := e.exit()
	require.NoError(t, err)
	return code
}

// exit waits for the process and returns its exit code; safe to call from
// any goroutine.
func (e *example) exit() (int, error) {
	err := e.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, err
}

// waitLocked waits until the example printed that it holds the lock.
func (e *example) waitLocked(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(e.stdout.String(), "locked ") }, 30*time.Second, 10*time.Millisecond,
		"stdout %q stderr %q", e.stdout.String(), e.stderr.String())
}

// holdKey takes key through the API for 30 s and returns the token.
func holdKey(t *testing.T, d *testdaemon.Daemon, key string) string {
	t.Helper()
	x := send(t, "POST", d.URL+"/v1/lock", testdaemon.APIKey, jsonCT, `{"key":"`+key+`","ttl":30}`)
	require.Equal(t, 200, x.status)
	require.Equal(t, true, data(t, x)["acquired"], "%s", x.answer)
	return data(t, x)["token"].(string)
}

func isHeld(t *testing.T, d *testdaemon.Daemon, key string) bool {
	t.Helper()
	x := send(t, "POST", d.URL+"/v1/lock", testdaemon.APIKey, jsonCT, `{"action":"status","key":"`+key+`"}`)
	require.Equal(t, 200, x.status)
	return data(t, x)["held"] == true
}

// heldThroughout checks, while e runs, that key stays held; it returns
// once e exited, with its exit code.
func heldThroughout(t *testing.T, d *testdaemon.Daemon, e *example, key string) int {
	t.Helper()
	exited := make(chan int, 1)
	go func() {
		code, err := e.exit()
		if err != nil {
			code = -1
		}
		exited <- code
	}()
	for {
		select {
		case code := <-exited:
			return code
		case <-time.After(200 * time.Millisecond):
			// The example may just have released before exiting.
			if !isHeld(t, d, key) {
				select {
				case code := <-exited:
					return code
				case <-time.After(2 * time.Second):
					t.Fatalf("%s not held while the example ran; stderr %s", key, e.stderr.String())
				}
			}
		}
	}
}

// lockExample is the shared scenario of the Go and Python examples,
// started by run(key, ttl, work): longer than its TTL, busy, lost.
func lockExample(t *testing.T, run func(t *testing.T, d *testdaemon.Daemon, key, ttlSeconds, workSeconds string) *example) {
	t.Run("holds past its TTL", func(t *testing.T) {
		d := startDaemon(t)
		e := run(t, d, "ex:long", "2", "6")
		e.waitLocked(t)
		assert.Equal(t, 0, heldThroughout(t, d, e, "ex:long"), "stderr %s", e.stderr.String())
		assert.Contains(t, e.stdout.String(), "done")
		assert.False(t, isHeld(t, d, "ex:long"), "released at the end")
	})
	t.Run("busy", func(t *testing.T) {
		d := startDaemon(t)
		holdKey(t, d, "ex:busy")
		e := run(t, d, "ex:busy", "2", "1")
		assert.Equal(t, 2, e.wait(t), "stderr %s", e.stderr.String())
		assert.Contains(t, e.stderr.String(), "busy")
		assert.NotContains(t, e.stdout.String(), "locked")
	})
	t.Run("told when the lock is lost", func(t *testing.T) {
		d := startDaemon(t)
		e := run(t, d, "ex:lost", "3", "60")
		e.waitLocked(t)
		pauseMasters(t, 3, d)
		assert.Equal(t, 3, e.wait(t), "stderr %s", e.stderr.String())
		assert.Contains(t, e.stderr.String(), "lock lost, work stopped")
	})
}

func TestGoExample(t *testing.T) {
	bin := filepath.Join(binDir, "go-example")
	build := exec.Command("go", "build", "-o", bin, "./examples/go")
	build.Dir = repoRoot(t)
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	lockExample(t, func(t *testing.T, d *testdaemon.Daemon, key, ttl, work string) *example {
		return startExample(t, d, nil, bin, "--key", key, "--ttl", ttl+"s", "--work", work+"s")
	})
}

func TestPythonExample(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed (make test-deps and .ci/run install it)")
	}
	lockExample(t, func(t *testing.T, d *testdaemon.Daemon, key, ttl, work string) *example {
		return startExample(t, d, nil, "python3", "examples/python/hold_lock.py", "--key", key, "--ttl", ttl, "--work", work)
	})
}

// cronCommand is the command of the crontab line in examples/shell/crontab,
// with the job's path pointing into examples/ and the given TTL.
func cronCommand(t *testing.T, ttl string) string {
	t.Helper()
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "examples/shell/crontab"))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 5 && strings.HasPrefix(line, "*/5") {
			cmd := strings.Join(f[5:], " ")
			require.Contains(t, cmd, "--ttl 60s")
			cmd = strings.Replace(cmd, "--ttl 60s", "--ttl "+ttl, 1)
			return strings.Replace(cmd, "/opt/jobs/job.sh", filepath.Join(root, "examples/shell/job.sh"), 1)
		}
	}
	t.Fatal("no */5 line in examples/shell/crontab")
	return ""
}

func TestShellExamples(t *testing.T) {
	t.Run("curl", func(t *testing.T) {
		d := startDaemon(t)
		e := startExample(t, d, nil, "sh", "examples/shell/curl.sh", "order:pay:10086")
		require.Equal(t, 0, e.wait(t), "stdout %s stderr %s", e.stdout.String(), e.stderr.String())
		out := e.stdout.String()
		assert.Contains(t, out, "locked order:pay:10086 fence ")
		assert.Contains(t, out, `"held":true`)
		assert.Contains(t, out, `"extended":true`)
		assert.Contains(t, out, `"released":true`)
		holdKey(t, d, "order:pay:busy")
		e = startExample(t, d, nil, "sh", "examples/shell/curl.sh", "order:pay:busy")
		assert.Equal(t, 2, e.wait(t))
	})

	t.Run("cron line: held past its TTL, and never twice", func(t *testing.T) {
		d := startDaemon(t)
		log := filepath.Join(t.TempDir(), "job.log")
		cmd := cronCommand(t, "2s")
		env := []string{"JOB_SECONDS=6", "JOB_LOG=" + log}
		first := startExample(t, d, env, "sh", "-c", cmd)
		require.Eventually(t, func() bool { b, _ := os.ReadFile(log); return len(b) > 0 }, 30*time.Second, 10*time.Millisecond)
		// The next run, while the first still works, finds it busy (flock -n).
		second := startExample(t, d, env, "sh", "-c", cmd)
		assert.Equal(t, 75, second.wait(t), "stderr %s", second.stderr.String())
		assert.Equal(t, 0, heldThroughout(t, d, first, "job:daily_report"), "stderr %s", first.stderr.String())
		b, err := os.ReadFile(log)
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		require.Len(t, lines, 2, "one run only: %s", b)
		assert.True(t, strings.HasPrefix(lines[0], "start ") && strings.HasPrefix(lines[1], "end "), "%s", b)
		assert.Contains(t, first.stdout.String(), "working on job:daily_report with fence ")
		assert.False(t, isHeld(t, d, "job:daily_report"))
	})

	t.Run("cron line: killed when the lock is lost", func(t *testing.T) {
		d := startDaemon(t)
		log := filepath.Join(t.TempDir(), "job.log")
		e := startExample(t, d, []string{"JOB_SECONDS=60", "JOB_LOG=" + log}, "sh", "-c", cronCommand(t, "3s"))
		require.Eventually(t, func() bool { b, _ := os.ReadFile(log); return len(b) > 0 }, 30*time.Second, 10*time.Millisecond)
		pauseMasters(t, 3, d)
		assert.Equal(t, 78, e.wait(t), "stderr %s", e.stderr.String())
		assert.Contains(t, e.stderr.String(), "lost")
		b, err := os.ReadFile(log)
		require.NoError(t, err)
		assert.Contains(t, string(b), "term ", "the job got SIGTERM")
		assert.NotContains(t, string(b), "end ")
	})
}

func TestPHPExample(t *testing.T) {
	if _, err := exec.LookPath("php"); err != nil {
		t.Skip("php is not installed: apt-get install php-cli (make test-deps and .ci/run install it)")
	}
	d := startDaemon(t)
	// 25 steps of 200 ms with a 2 s TTL, extended between steps: held for
	// more than twice its TTL.
	e := startExample(t, d, nil, "php", "examples/php/distlock.php", "10086", "25", "2")
	e.waitLocked(t)
	assert.Equal(t, 0, heldThroughout(t, d, e, "order:pay:10086"), "stderr %s", e.stderr.String())
	assert.Contains(t, e.stdout.String(), "paid order 10086")
	assert.Contains(t, e.stdout.String(), "released")

	holdKey(t, d, "order:pay:20000")
	e = startExample(t, d, nil, "php", "examples/php/distlock.php", "20000")
	assert.Equal(t, 2, e.wait(t), "stderr %s", e.stderr.String())
	assert.Contains(t, e.stderr.String(), "busy")
}
