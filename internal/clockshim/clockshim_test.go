package clockshim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/redlockd/redlockd/internal/redisproc"
)

// The tests run real redis-servers under the shim, next to unskewed ones,
// and compare the two. Bounds are generous (a shared 2-core machine): a
// loaded machine only makes the real side slower, so the assertions are
// written so that slowness can make them pass late but not fail.

var (
	shimPath string // built once by TestMain
	shimSkip string // why the shim tests skip, if they do
)

func TestMain(m *testing.M) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		fmt.Fprintln(os.Stderr, "clockshim tests need redis-server:", redisproc.ErrNotInstalled)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "clockshim-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shimPath, err = Build(dir)
	switch {
	case errors.Is(err, ErrNoCompiler):
		shimSkip = err.Error()
	case err != nil:
		fmt.Fprintln(os.Stderr, "build the shim:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	if runtime.GOOS != "linux" {
		shimSkip = "the clock shim is an LD_PRELOAD library for Linux"
	}
	code := 0
	func() {
		defer os.RemoveAll(dir)
		code = m.Run()
	}()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func needShim(t *testing.T) {
	t.Helper()
	if shimSkip != "" {
		t.Skip("skipping: " + shimSkip)
	}
}

// server is one redis-server and a client for it.
type server struct {
	*redis.Client
	proc *redisproc.Server
}

// startRedis starts a redis-server, under the shim following clk if clk is
// not nil (and checks that the shim is really mapped into it).
func startRedis(t *testing.T, clk *Clock) server {
	t.Helper()
	var opts redisproc.Options
	if clk != nil {
		opts.LDPreload, opts.Env = shimPath, clk.Env()
	}
	p, err := redisproc.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Error(err)
		}
	})
	if clk != nil {
		maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", p.PID()))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(maps), shimPath) {
			t.Fatalf("pid %d does not map %s: LD_PRELOAD did not take", p.PID(), shimPath)
		}
	}
	c := redis.NewClient(&redis.Options{
		Addr:                  p.Addr(),
		MaxRetries:            -1,
		DialTimeout:           time.Second,
		ReadTimeout:           2 * time.Second,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { c.Close() })
	return server{Client: c, proc: p}
}

func newClock(t *testing.T) *Clock {
	t.Helper()
	clk, err := NewClock(filepath.Join(t.TempDir(), "clock"))
	if err != nil {
		t.Fatal(err)
	}
	return clk
}

// serverTime returns the server's TIME and the real time halfway through
// the round trip.
func serverTime(t *testing.T, s server) (remote, local time.Time) {
	t.Helper()
	before := time.Now()
	remote, err := s.Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	after := time.Now()
	return remote, before.Add(after.Sub(before) / 2)
}

// offsetOf returns how far the server's clock is ahead of ours, and the
// round trip's half-width (the uncertainty).
func offsetOf(t *testing.T, s server) (offset, uncertainty time.Duration) {
	t.Helper()
	before := time.Now()
	remote, err := s.Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	rtt := time.Since(before)
	return remote.Sub(before.Add(rtt / 2)), rtt / 2
}

// eventually polls cond every 5 ms until it holds or limit passes, and
// returns how long that took and whether it held.
func eventually(limit time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	for {
		if cond() {
			return time.Since(start), true
		}
		if time.Since(start) > limit {
			return time.Since(start), false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func exists(t *testing.T, s server, key string) bool {
	t.Helper()
	_, err := s.Get(context.Background(), key).Result()
	switch {
	case err == nil:
		return true
	case errors.Is(err, redis.Nil):
		return false
	default:
		t.Fatalf("GET %s: %v", key, err)
		return false
	}
}

// A preloaded jemalloc redis-server starts, works, and with offset 0 and
// rate 1 tells the real time.
func TestIdentityClockRedisStartsAndTellsRealTime(t *testing.T) {
	needShim(t)
	s := startRedis(t, newClock(t))
	ctx := context.Background()

	if info, err := s.Info(ctx, "memory").Result(); err != nil {
		t.Fatalf("INFO memory: %v", err)
	} else if !strings.Contains(info, "mem_allocator:jemalloc") {
		t.Logf("note: this redis-server is not built with jemalloc, the case the shim is careful about")
	}
	if err := s.Set(ctx, "k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET k = %q, %v; want v", v, err)
	}
	if n, err := s.Incr(ctx, "n").Result(); err != nil || n != 1 {
		t.Fatalf("INCR n = %d, %v; want 1", n, err)
	}
	if ttl, err := s.PTTL(ctx, "k").Result(); err != nil || ttl < 50*time.Second || ttl > time.Minute {
		t.Fatalf("PTTL k = %v, %v; want about 1m", ttl, err)
	}
	// Several samples: the smallest error is the honest one on a busy box.
	best := time.Hour
	for range 5 {
		off, unc := offsetOf(t, s)
		if off < 0 {
			off = -off
		}
		if off > unc {
			off -= unc
		} else {
			off = 0
		}
		best = min(best, off)
	}
	if best > 50*time.Millisecond {
		t.Errorf("TIME is %v off the real clock with offset 0, rate 1; want within 50ms", best)
	}
	if !s.proc.Running() {
		t.Fatal("redis-server exited")
	}
}

// Jump(+5s) expires a 4 s key at once on the skewed master, and not on an
// unskewed one; TIME moves by 5 s; Jump back and Reset return it.
func TestJumpForwardExpiresKeys(t *testing.T) {
	needShim(t)
	clk := newClock(t)
	skewed, plain := startRedis(t, clk), startRedis(t, nil)
	ctx := context.Background()

	for _, s := range []server{skewed, plain} {
		if err := s.Set(ctx, "k", "v", 4*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	setAt := time.Now()
	if err := clk.Jump(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	took, gone := eventually(time.Second, func() bool { return !exists(t, skewed, "k") })
	if !gone {
		t.Fatalf("a 4s key is still there %v after Jump(+5s)", took)
	}
	t.Logf("4s key gone %v after Jump(+5s) (%v after SET)", took, time.Since(setAt))
	if since := time.Since(setAt); since < 3*time.Second && !exists(t, plain, "k") {
		t.Errorf("negative control: the unskewed master lost its 4s key after only %v", since)
	}

	off, unc := offsetOf(t, skewed)
	if d := off - 5*time.Second; d < -100*time.Millisecond-unc || d > 100*time.Millisecond+unc {
		t.Errorf("after Jump(+5s) TIME is %v ahead, want 5s ± 100ms", off)
	}
	if d := time.Until(clk.Now()) - 5*time.Second; d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("Clock.Now is %v off real+5s", d)
	}

	// A step back is applied too (a backward jump is a deliberate step).
	if err := clk.Jump(-3 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, ok := eventually(time.Second, func() bool {
		off, unc := offsetOf(t, skewed)
		return off > 2*time.Second-100*time.Millisecond-unc && off < 2*time.Second+100*time.Millisecond+unc
	}); !ok {
		off, _ := offsetOf(t, skewed)
		t.Errorf("after Jump(-3s) TIME is %v ahead, want 2s", off)
	}
	if err := clk.Reset(); err != nil {
		t.Fatal(err)
	}
	if _, ok := eventually(time.Second, func() bool {
		off, unc := offsetOf(t, skewed)
		return off > -50*time.Millisecond-unc && off < 50*time.Millisecond+unc
	}); !ok {
		off, _ := offsetOf(t, skewed)
		t.Errorf("after Reset TIME is %v ahead, want 0", off)
	}
}

// SetRate(2): TIME advances about twice as fast, and a 1000 ms key expires
// after about 500 ms of real time, while the same key on an unskewed master
// is still there.
func TestRateTwoExpiresKeysEarly(t *testing.T) {
	needShim(t)
	clk := newClock(t)
	skewed, plain := startRedis(t, clk), startRedis(t, nil)
	ctx := context.Background()

	if err := clk.SetRate(2); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // past the shim's 10 ms re-read

	r0, l0 := serverTime(t, skewed)
	time.Sleep(500 * time.Millisecond)
	r1, l1 := serverTime(t, skewed)
	real, fake := l1.Sub(l0), r1.Sub(r0)
	ratio := float64(fake) / float64(real)
	t.Logf("rate 2: TIME advanced %v over %v real (x%.3f)", fake, real, ratio)
	if ratio < 1.6 || ratio > 2.4 {
		t.Errorf("TIME advanced %v over %v real (x%.2f), want x2 ± 20%%", fake, real, ratio)
	}

	// setAt is taken before the skewed SET, so time.Since(setAt) never
	// understates the real time the key lived (the plain SET after it may
	// take a while on a loaded machine).
	setAt := time.Now()
	for _, s := range []server{skewed, plain} {
		if err := s.Set(ctx, "k", "v", time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	_, gone := eventually(900*time.Millisecond, func() bool { return !exists(t, skewed, "k") })
	took := time.Since(setAt)
	if !gone {
		t.Fatalf("a 1000ms key is still there %v (real) after SET at rate 2; want gone after ~500ms", took)
	}
	t.Logf("rate 2: 1000ms key gone %v after SET", took)
	// It cannot go before 500 ms of real time (less the shim's 10 ms lag):
	// an earlier loss would mean something else removed it.
	if took < 400*time.Millisecond {
		t.Errorf("1000ms key gone after only %v at rate 2; want ~500ms", took)
	}
	if since := time.Since(setAt); since < 950*time.Millisecond && !exists(t, plain, "k") {
		t.Errorf("negative control: the unskewed master lost its 1000ms key after %v", since)
	}
}

// A rate change never makes the clock step back, even when the shim sees it
// up to 10 ms late: TIME, hammered across 2 -> 0.5 -> 0 -> 1, never
// decreases. Reset then brings it back to the real time.
func TestRateChangesNeverStepBack(t *testing.T) {
	needShim(t)
	clk := newClock(t)
	s := startRedis(t, clk)

	stop := make(chan struct{})
	type sample struct {
		t   time.Time
		err error
	}
	samples := make(chan []sample, 1)
	go func() {
		var out []sample
		for {
			select {
			case <-stop:
				samples <- out
				return
			default:
			}
			tm, err := s.Time(context.Background()).Result()
			out = append(out, sample{tm, err})
			if err != nil {
				samples <- out
				return
			}
		}
	}()
	for _, r := range []float64{2, 0.5, 0, 1.5, 1} {
		time.Sleep(100 * time.Millisecond)
		if err := clk.SetRate(r); err != nil {
			t.Error(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	got := <-samples
	if len(got) < 100 {
		t.Fatalf("only %d TIME samples", len(got))
	}
	for i, smp := range got {
		if smp.err != nil {
			t.Fatalf("TIME: %v", smp.err)
		}
		if i > 0 && smp.t.Before(got[i-1].t) {
			t.Fatalf("TIME stepped back by %v at sample %d of %d", got[i-1].t.Sub(smp.t), i, len(got))
		}
	}
	t.Logf("%d TIME samples, non-decreasing", len(got))

	if err := clk.Reset(); err != nil {
		t.Fatal(err)
	}
	if _, ok := eventually(time.Second, func() bool {
		off, unc := offsetOf(t, s)
		return off > -50*time.Millisecond-unc && off < 50*time.Millisecond+unc
	}); !ok {
		off, _ := offsetOf(t, s)
		t.Errorf("after Reset TIME is %v ahead, want 0", off)
	}
}

// A process started after the clock drifted adopts the file's clock
// exactly, drift included, as a restarted process on a fast machine would.
func TestRestartedProcessKeepsSkew(t *testing.T) {
	needShim(t)
	clk := newClock(t)
	if err := clk.SetRate(3); err != nil {
		t.Fatal(err)
	}
	if err := clk.Jump(time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // 600 ms of drift, in the file only
	s := startRedis(t, clk)
	remote, local := serverTime(t, s)
	want := clk.Now()
	// want is read after local; the file's clock runs x3 in between.
	if d := remote.Sub(want); d < -150*time.Millisecond || d > 50*time.Millisecond {
		t.Errorf("new process shows %v, the file's clock %v (diff %v); real is %v", remote, want, d, local)
	}
	if ahead := remote.Sub(local); ahead < 1500*time.Millisecond {
		t.Errorf("new process is only %v ahead of real; want >= 1.6s (1s jump + 600ms drift)", ahead)
	}
}

func TestClockFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	clk, err := NewClock("clock")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "clock"); clk.Path() != want {
		t.Errorf("Path = %q, want %q (absolute)", clk.Path(), want)
	}
	if env := clk.Env(); len(env) != 1 || env[0] != "REDLOCK_CLOCK_FILE="+clk.Path() {
		t.Errorf("Env = %q", env)
	}
	read := func() []string {
		t.Helper()
		b, err := os.ReadFile(clk.Path())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(string(b), "\n") || strings.Count(string(b), "\n") != 1 {
			t.Fatalf("clock file %q is not one line", b)
		}
		return strings.Fields(string(b))
	}
	f := read()
	if len(f) != 5 || f[0] != "0" || f[1] != "1" || f[2] != "0" || f[4] != "0" {
		t.Fatalf("new clock file = %q, want offset 0 rate 1 skew 0 epoch 0", f)
	}
	if fi, err := os.Stat(clk.Path()); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("clock file mode = %v, %v; want 0644", fi.Mode(), err)
	}

	if err := clk.Jump(1500 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := clk.Jump(-500 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if f = read(); f[0] != "1000000000" || f[4] != "2" {
		t.Errorf("after jumps file = %q, want offset 1000000000, epoch 2", f)
	}
	if err := clk.SetRate(1.1); err != nil {
		t.Fatal(err)
	}
	if f = read(); f[1] != "1.1" || f[4] != "2" {
		t.Errorf("after SetRate(1.1) file = %q, want rate 1.1 and the same epoch", f)
	}
	// Now reads the real clock at some instant between before and after:
	// 1s ahead of it plus the drift since SetRate. (Comparing with one
	// real reading taken after Now failed when this process was
	// descheduled between the two reads for longer than the drift.)
	before := time.Now()
	now := clk.Now()
	after := time.Now()
	if lo, hi := now.Sub(before)-time.Second, now.Sub(after)-time.Second; lo < 0 || hi > 50*time.Millisecond {
		t.Errorf("Now - real = 1s + %v (from the read before) and 1s + %v (from the read after), want 1s + a little drift", lo, hi)
	}
	for _, bad := range []float64{-1, MaxRate + 1} {
		if err := clk.SetRate(bad); err == nil {
			t.Errorf("SetRate(%v) = nil, want an error", bad)
		}
	}
	if err := clk.Jump(time.Duration(1<<63 - 1)); err == nil {
		t.Error("Jump overflowing the offset = nil, want an error")
	}
	if f = read(); f[0] != "1000000000" || f[1] != "1.1" {
		t.Errorf("failed calls changed the file: %q", f)
	}
	if err := clk.Reset(); err != nil {
		t.Fatal(err)
	}
	if f = read(); f[0] != "0" || f[1] != "1" || f[2] != "0" || f[4] != "3" {
		t.Errorf("after Reset file = %q, want 0 1 0 <now> 3", f)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("dir holds %d entries, want only the clock file (temp files left?)", len(entries))
	}
}

func TestBuildCachesAndNeedsCompiler(t *testing.T) {
	needShim(t)
	p1 := shimPath // built by TestMain
	fi1, err := os.Stat(p1)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := Build(filepath.Dir(p1))
	if err != nil {
		t.Fatal(err)
	}
	fi2, err := os.Stat(p2)
	if err != nil {
		t.Fatal(err)
	}
	if p1 != p2 || !os.SameFile(fi1, fi2) || !fi1.ModTime().Equal(fi2.ModTime()) {
		t.Errorf("second Build rebuilt: %s then %s", p1, p2)
	}
	out, err := exec.Command("nm", "-D", "--defined-only", p1).Output()
	if err == nil {
		for _, sym := range []string{"gettimeofday", "clock_gettime", "time"} {
			if !strings.Contains(string(out), " T "+sym+"\n") {
				t.Errorf("%s does not export %s:\n%s", p1, sym, out)
			}
		}
	}

	t.Setenv("PATH", "")
	t.Setenv("CC", "")
	if _, err := Build(t.TempDir()); !errors.Is(err, ErrNoCompiler) {
		t.Errorf("Build with no compiler = %v, want ErrNoCompiler", err)
	}
}
