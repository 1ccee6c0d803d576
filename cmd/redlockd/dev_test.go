package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// devProcess is a running `redlockd dev` of the test binary.
type devProcess struct {
	cmd    *exec.Cmd
	banner string      // what it printed up to "Ctrl-C stops …"
	logs   *syncBuffer // its stderr
	exited chan error
}

// startDev runs `redlockd dev` with args and reads its banner; the process
// is killed at cleanup if the test has not stopped it.
func startDev(t *testing.T, args ...string) *devProcess {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"dev"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	d := &devProcess{cmd: cmd, logs: &syncBuffer{}, exited: make(chan error, 1)}
	cmd.Stderr = d.logs
	require.NoError(t, cmd.Start())
	go func() { d.exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	var banner strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		banner.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "Ctrl-C stops") {
			break
		}
	}
	go func() { // keep draining, so the child never blocks on stdout
		for sc.Scan() {
		}
	}()
	d.banner = banner.String()
	return d
}

// tryBody is the JSON body of the banner's "Try:" curl line.
func (d *devProcess) tryBody(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^Try:\n  curl .* -d '([^']*)'$`).FindStringSubmatch(d.banner)
	require.NotNil(t, m, "no curl line after Try: in\n%s\n%s", d.banner, d.logs)
	return m[1]
}

// stop sends SIGINT and waits for a clean exit.
func (d *devProcess) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-d.exited:
		require.NoError(t, err, "%s", d.logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("dev did not stop on SIGINT: %s", d.logs)
	}
}

// The curl line `redlockd dev` prints works as printed: its ttl is the
// daemon's default TTL, lowered to --max-ttl when that is smaller (with
// --max-ttl 5 it used to say 30, which the daemon refuses).
func TestDevTryLineFitsMaxTTL(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		ttl  int
	}{
		{"default max-ttl", nil, 30},
		{"max-ttl 5", []string{"--max-ttl", "5"}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := freeAddr(t)
			d := startDev(t, append([]string{"--masters", "3", "--listen", addr, "--log-format", "json"}, tc.args...)...)
			body := d.tryBody(t)
			assert.Equal(t, `{"action":"acquire","key":"order:pay:10086","ttl":`+strconv.Itoa(tc.ttl)+`}`, body)
			base := "http://" + addr
			require.Eventually(t, func() bool {
				resp, err := httpClient.Get(base + "/readyz")
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == 200
			}, 20*time.Second, 20*time.Millisecond, "%s", d.logs)
			st, env, _ := post(t, lockURL(base), DevAPIKey, body)
			require.Equal(t, 200, st, env.Msg)
			assert.Equal(t, true, env.Data["acquired"], env.Msg)
			assert.EqualValues(t, tc.ttl, env.Data["ttl"])
			// The banner names each master with its pid (the README's
			// kill -9 step): a redis-server that answers on that address.
			masters := regexp.MustCompile(`(127\.0\.0\.1:\d+) \(pid (\d+)\)`).FindAllStringSubmatch(d.banner, -1)
			require.Len(t, masters, 3, "%s", d.banner)
			for _, m := range masters {
				comm, err := os.ReadFile("/proc/" + m[2] + "/comm")
				require.NoError(t, err, "pid %s of %s", m[2], m[1])
				assert.Equal(t, "redis-server", strings.TrimSpace(string(comm)))
				r := redis.NewClient(&redis.Options{Addr: m[1]})
				pid, err := r.Do(context.Background(), "INFO", "server").Text()
				r.Close()
				require.NoError(t, err)
				assert.Contains(t, pid, "process_id:"+m[2]+"\r\n", "the pid shown for %s", m[1])
			}
			d.stop(t)
		})
	}
}
