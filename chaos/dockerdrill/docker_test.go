package dockerdrill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ory/dockertest/v3/docker"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/chaos"
)

const (
	// The Redis image with the gettimeofday shim (internal/clockshim) in
	// /usr/lib/redlock, for the clock rows: a tag of its own, since
	// `make images` builds redlockd/redis:local without it.
	redisImage    = "redlockd/redis:clockshim"
	clockShimSO   = "dist/libclockshim.so"
	redlockdImage = "redlockd/redlockd:local"
	chaosImage    = "redlockd/chaos:local"
	// The demo API key of docker/redlockd.compose.yaml (loopback only).
	apiKey  = "compose-demo-key-0123456789abcdef"
	account = "demo"
)

// The rows of the Docker drill, in this order. kill-3 ends with the
// operator's recovery (repair-fences), which the drill runs the moment the
// fresh containers answer PING, usually before the daemons' next probe:
// the daemons must accept a repair they see together with the restart.
var scenarios = []string{"kill-2", "kill-3", "pause-2", "partition-2", "restart-empty", "restart-empty-noquarantine", "latency-2", "reset-2",
	"data-wipe", "data-wipe-nocheck", "clock-jump-contender", "clock-jump-contender-novoteclock", "clock-jump-restart", "clock-jump-restart-noreference",
	"rollback", "rollback-nogranted"}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// TestDockerDrills brings up the compose deployment (five Redis
// containers, two daemons) and runs the Docker drill rows against it.
func TestDockerDrills(t *testing.T) {
	redis.SetLogger(quietLogger{})
	required := os.Getenv("REDLOCK_REQUIRE_DOCKER") == "1"
	// REDLOCK_SKIP_DOCKER=1: a machine with a Docker engine the tests must
	// not touch (README, "Set up").
	if os.Getenv("REDLOCK_SKIP_DOCKER") == "1" {
		if required {
			t.Fatal("REDLOCK_SKIP_DOCKER=1 and REDLOCK_REQUIRE_DOCKER=1 contradict each other: unset one")
		}
		t.Skip("REDLOCK_SKIP_DOCKER=1: skipping the Docker drills")
	}
	unavailable := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if required {
			t.Fatalf("%s; REDLOCK_REQUIRE_DOCKER=1 makes that a failure", msg)
		}
		t.Skipf("%s: skipping the Docker drills (set REDLOCK_REQUIRE_DOCKER=1 to fail instead)", msg)
	}
	dc, err := chaos.DockerClient("")
	if err != nil {
		unavailable("%v", err)
	}
	composeBin, err := exec.LookPath("docker-compose")
	if err != nil {
		unavailable("no docker-compose: %v", err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	ensureImages(t, dc, root)

	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	project := fmt.Sprintf("redlockdtest%d", os.Getpid())
	ports := freePorts(t, 2)
	portA, portB := ports[0], ports[1]
	clockDir := t.TempDir()
	for i := 1; i <= 5; i++ {
		require.NoError(t, os.Mkdir(filepath.Join(clockDir, fmt.Sprintf("redis%d", i)), 0o755))
	}
	compose := func(ctx context.Context, args ...string) error {
		cmd := exec.CommandContext(ctx, composeBin, append([]string{"-p", project, "-f", "docker-compose.yml", "-f", "docker/chaos.compose.yml"}, args...)...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(),
			"REDIS_IMAGE="+redisImage, "REDLOCKD_IMAGE="+redlockdImage, "CHAOS_IMAGE="+chaosImage,
			"REDLOCKD_A_PORT="+strconv.Itoa(portA), "REDLOCKD_B_PORT="+strconv.Itoa(portB),
			"CHAOS_CLOCK_DIR="+clockDir, "REDLOCKD_MAX_TTL=5", "REDIS_LD_PRELOAD=/usr/lib/redlock/"+filepath.Base(clockShimSO),
		)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if err != nil {
			return fmt.Errorf("docker-compose %v: %w\n%s", args, err, out.String())
		}
		return nil
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		assert.NoError(t, compose(ctx, "down", "-v", "--remove-orphans"))
	})
	require.NoError(t, compose(ctx, "up", "-d"))
	daemons := []string{fmt.Sprintf("http://127.0.0.1:%d", portA), fmt.Sprintf("http://127.0.0.1:%d", portB)}
	for _, u := range daemons {
		waitHealthy(t, ctx, u)
	}

	target, err := chaos.NewDockerTarget(ctx, chaos.DockerOptions{
		Project: project, Daemons: daemons, APIKey: apiKey, Account: account,
		PerMasterTimeout: 50 * time.Millisecond, Logf: t.Logf,
	})
	require.NoError(t, err)
	defer target.Close()

	cfg := chaos.Config{
		Duration: 6 * time.Second, TTL: time.Second, Seed: 1,
		// The health interval of the daemons (the config default). The
		// in-process library clients run in this -race test binary, which
		// misses 50ms deadlines on a loaded two-core box (a CI run failed
		// I5 with healthy masters answering "no answer within the
		// per-master timeout"), so 150ms as in the process drills; the
		// daemons in their containers keep the 50ms default. TTLs up to
		// 12s, not 8s as `redlock-chaos drill` allows: under a CI run's load a
		// fresh container took 10s to start, longer than an 8s lease in
		// the restart-empty rows.
		Client: chaos.DaemonConfig{PerMasterTimeout: 150 * time.Millisecond, HealthInterval: time.Second, MaxTTL: 12 * time.Second},
		// A loaded two-core machine shared with other builds.
		Slack: 2 * time.Second, FastSlack: time.Second,
		Logf: t.Logf,
	}
	out := t.TempDir()
	if dir := os.Getenv("CHAOS_OUT"); dir != "" {
		out = dir
		require.NoError(t, os.MkdirAll(out, 0o755))
	}
	scs, err := chaos.Find(scenarios...)
	require.NoError(t, err)
	only := os.Getenv("CHAOS_SCENARIO") // as for TestDrills: name1,name2 runs only those rows
	for _, sc := range scs {
		if only != "" && !strings.Contains(","+only+",", ","+sc.Name+",") {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			res := chaos.Run(ctx, target, cfg, sc, out)
			require.Empty(t, res.Skipped, "the compose target must support this row")
			for _, n := range res.Notes {
				t.Logf("note: %s", n)
			}
			for _, v := range res.Violations {
				t.Logf("%s: %s", v.Invariant, v.Detail)
			}
			t.Logf("%s: %s, %d grants, %d failures, porcupine %s, p50 %v p99 %v, in %v",
				res.Scenario, res.Verdict(), res.Grants, res.Failures, res.Linear, res.P50, res.P99, res.Elapsed.Round(time.Millisecond))
			require.Empty(t, res.Error, "the drill itself failed")
			assert.Zero(t, res.Unexpected, "unexpected violations: %v", res.Counts)
			assert.Empty(t, res.Missed, "a negative control must catch its violation")
		})
	}
	t.Run("stop-start", func(t *testing.T) { stopStart(t, ctx, target) })
	t.Run("daemons-behind-proxies", func(t *testing.T) { daemonsBehindProxies(t, ctx, target, daemons) })
}

// daemonsBehindProxies checks that the proxy faults reach the daemons,
// not only the drill's own library clients: a blackholed master stops
// counting for both daemons while it still answers PING directly, and a
// partition of view 0 cuts off daemon a alone.
func daemonsBehindProxies(t *testing.T, ctx context.Context, target *chaos.DockerTarget, daemons []string) {
	const m = 3
	require.True(t, target.Supports(chaos.FaultBlackhole), "the drill overlay puts chaos proxies in front of the masters")
	counting := func(url string) []bool {
		c, err := target.DaemonCounting(ctx, url)
		require.NoError(t, err)
		return c
	}
	require.NoError(t, target.Blackhole(ctx, m, true))
	for _, u := range daemons {
		require.Eventually(t, func() bool { return !counting(u)[m] }, 30*time.Second, 100*time.Millisecond,
			"%s must stop counting a blackholed master", u)
	}
	rdb := redis.NewClient(&redis.Options{Addr: target.DirectAddrs()[m]})
	defer rdb.Close()
	require.NoError(t, rdb.Ping(ctx).Err(), "the master itself answers: only the path to it is blackholed")
	require.NoError(t, target.Blackhole(ctx, m, false))
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, target.Ready(rctx), "the daemons count it again once the blackhole is lifted")

	require.NoError(t, target.Partition(ctx, 0, m, true))
	require.Eventually(t, func() bool { return !counting(daemons[0])[m] }, 30*time.Second, 100*time.Millisecond,
		"daemon a shares view 0: a partition of view 0 cuts it off")
	assert.True(t, counting(daemons[1])[m], "daemon b is not in view 0 and still counts master %d", m)
	require.NoError(t, target.HealAll(ctx))
	rctx, cancel = context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, target.Ready(rctx))
}

// TestDockerDrills' last step: docker stop and start of one master.
func stopStart(t *testing.T, ctx context.Context, target *chaos.DockerTarget) {
	const m = 4
	addr := target.DirectAddrs()[m]
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	require.NoError(t, rdb.Set(ctx, "chaos:stop-start", "before", 0).Err())
	rdb.Close()
	require.NoError(t, target.Stop(ctx, m, 2*time.Second))
	require.Eventually(t, func() bool {
		c, err := target.Counting(ctx)
		return err == nil && !c[m]
	}, 30*time.Second, 100*time.Millisecond, "the daemons must stop counting a stopped master")
	require.NoError(t, target.Start(ctx, m))
	rdb = redis.NewClient(&redis.Options{Addr: target.DirectAddrs()[m]})
	defer rdb.Close()
	n, err := rdb.Exists(ctx, "chaos:stop-start").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a stopped master comes back without its data (no persistence)")
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, target.Ready(rctx), "the daemons count it again after its quarantine")
}

// ensureImages builds the images the drill runs. The redlockd and drill
// images are rebuilt every time (a static build from this tree, cached by
// Go, then a FROM scratch image: seconds): an image left from another commit would
// drill other code than the one under test. The Redis image, which only
// packages the host's redis-server and the clock shim, is built when
// missing, or always with REDLOCK_DOCKER_REBUILD=1.
func ensureImages(t *testing.T, dc *docker.Client, root string) {
	t.Helper()
	targets := []string{"image-redlockd", "image-chaos"}
	_, err := dc.InspectImage(redisImage)
	if err != nil && !errors.Is(err, docker.ErrNoSuchImage) {
		require.NoError(t, err)
	}
	if err != nil || os.Getenv("REDLOCK_DOCKER_REBUILD") == "1" {
		targets = append(targets, clockShimSO, "image-redis")
	}
	t.Logf("building %v (REDIS_IMAGE=%s REDLOCKD_IMAGE=%s CHAOS_IMAGE=%s)", targets, redisImage, redlockdImage, chaosImage)
	cmd := exec.Command("make", append(targets, "REDIS_IMAGE="+redisImage, "REDIS_EXTRA="+clockShimSO, "REDLOCKD_IMAGE="+redlockdImage, "CHAOS_IMAGE="+chaosImage)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "make %v:\n%s", targets, out)
}

// freePorts returns n distinct free loopback ports (free when they were
// picked: the daemons publish on them a few seconds later).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var out []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	return out
}

func waitHealthy(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		require.False(t, time.Now().After(deadline), "%s/healthz does not answer: %v", url, err)
		time.Sleep(250 * time.Millisecond)
	}
}
