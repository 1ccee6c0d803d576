package clockshim

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// EnvVar names the environment variable through which the shim finds its
// control file.
const EnvVar = "REDLOCK_CLOCK_FILE"

// MaxRate bounds SetRate. Rates far from 1 are not clock drift but a
// different experiment; this only catches unit mistakes (1100 for 1.1).
const MaxRate = 1000

// Clock is one control file: the fake wall clock of every process started
// with the shim and Env. Its methods are safe for concurrent use. The file
// holds one line, "offset_ns rate skew_ns anchor_ns epoch" (see csrc/shim.c);
// Clock keeps the same state in memory and rewrites the whole line
// atomically on each change.
type Clock struct {
	path string

	mu sync.Mutex
	st state
}

// state is the content of the control file.
type state struct {
	offset int64   // ns, the sum of all jumps
	rate   float64 // fake seconds per real second from anchor on
	skew   int64   // ns of drift accumulated by earlier rates up to anchor
	anchor int64   // Unix ns (real) when rate took effect
	epoch  uint64  // bumped on every deliberate step (Jump, Reset)
}

// at returns the fake Unix ns time for the real Unix ns time t, with the
// same arithmetic as the shim.
func (s state) at(t int64) int64 {
	v := t + s.offset + s.skew
	if s.rate != 1 {
		v += int64(float64(t-s.anchor) * (s.rate - 1))
	}
	return v
}

func (s state) line() string {
	return fmt.Sprintf("%d %s %d %d %d\n", s.offset, strconv.FormatFloat(s.rate, 'f', -1, 64), s.skew, s.anchor, s.epoch)
}

// NewClock creates (or overwrites) the control file at path with offset 0
// and rate 1: the real clock. A relative path is made absolute, since the
// processes that read it run in their own directories. The directory must
// exist.
func NewClock(path string) (*Clock, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("clockshim: clock file: %w", err)
	}
	c := &Clock{path: abs, st: state{rate: 1, anchor: time.Now().UnixNano()}}
	if err := c.write(c.st); err != nil {
		return nil, err
	}
	return c, nil
}

// Path returns the absolute path of the control file.
func (c *Clock) Path() string { return c.path }

// Env returns the environment a process needs, besides LD_PRELOAD, to follow
// this clock: {"REDLOCK_CLOCK_FILE=" + path}.
func (c *Clock) Env() []string { return []string{EnvVar + "=" + c.path} }

// Jump steps the clock by d, forward (d > 0) or back (d < 0), from now on.
// The processes apply it at their next time call at least 10 ms after their
// last read of the file.
func (c *Clock) Jump(d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.st
	off := st.offset + int64(d)
	if (d > 0 && off < st.offset) || (d < 0 && off > st.offset) {
		return fmt.Errorf("clockshim: Jump(%v): offset overflows", d)
	}
	st.offset = off
	st.epoch++
	return c.commit(st)
}

// SetRate makes the clock run at r fake seconds per real second from now
// on (1.1: 10% fast; 0.9: 10% slow; 0: stopped), keeping the time it shows
// now: the drift accumulated at the old rate is kept. r must be in
// [0, MaxRate].
func (c *Clock) SetRate(r float64) error {
	if math.IsNaN(r) || r < 0 || r > MaxRate {
		return fmt.Errorf("clockshim: SetRate(%v): rate must be in [0, %d]", r, MaxRate)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.st
	now := time.Now().UnixNano()
	// Fold the drift so far into skew and re-anchor, so that the file's
	// clock is continuous at now.
	st.skew = st.at(now) - now - st.offset
	st.anchor = now
	st.rate = r
	return c.commit(st)
}

// Reset puts the clock back to the real time, offset 0 and rate 1: a
// deliberate step, backwards if the clock was ahead.
func (c *Clock) Reset() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := state{rate: 1, anchor: time.Now().UnixNano(), epoch: c.st.epoch + 1}
	return c.commit(st)
}

// Now returns the time the clock shows now, as the control file describes
// it. A process that follows the file agrees with it, except that it sees
// each change up to ~10 ms late; after a rate change it may therefore stay
// that far ahead, since its clock never steps back on a rate change.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	st := c.st
	c.mu.Unlock()
	return time.Unix(0, st.at(time.Now().UnixNano()))
}

// commit writes st and makes it the current state. The caller holds mu.
func (c *Clock) commit(st state) error {
	if err := c.write(st); err != nil {
		return err
	}
	c.st = st
	return nil
}

// write replaces the control file atomically: a temp file in the same
// directory, renamed over it, so that a reader sees the old line or the
// new one, never a part.
func (c *Clock) write(st state) (err error) {
	dir, base := filepath.Split(c.path)
	f, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return fmt.Errorf("clockshim: write clock file: %w", err)
	}
	defer func() {
		if err != nil {
			os.Remove(f.Name())
		}
	}()
	if _, err = f.WriteString(st.line()); err != nil {
		f.Close()
		return fmt.Errorf("clockshim: write clock file: %w", err)
	}
	// Readable by a redis-server running as another user (a container).
	if err = f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("clockshim: write clock file: %w", err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("clockshim: write clock file: %w", err)
	}
	if err = os.Rename(f.Name(), c.path); err != nil {
		return fmt.Errorf("clockshim: write clock file: %w", err)
	}
	return nil
}
