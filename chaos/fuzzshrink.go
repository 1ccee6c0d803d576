package chaos

// Shrinking a fuzz schedule that found a safety violation: delta debugging
// over episodes, then over the steps of the episode left, each candidate
// rerun on a fresh target, for a bounded number of reruns.

import (
	"context"
	"fmt"
	"go/format"
	"slices"
	"strings"
	"time"
)

// ShrinkConfig is one shrink.
type ShrinkConfig struct {
	// Schedule found Found.
	Schedule FuzzSchedule
	Found    *FuzzResult
	// Control is the run's negative control (nil: every guard on).
	Control *FuzzControl
	// Attempts bounds the reruns (each one a fresh target: ~20-40s).
	Attempts int
	Logf     func(format string, args ...any)
	// Progress receives one line per rerun.
	Progress func(string)
}

// ShrinkFuzz returns the smallest schedule it could find that still
// produces a safety violation, and an error only if ctx ended. A finding
// depends on timing on real processes, so "still produces" means "did so
// on this rerun": a candidate that happens not to reproduce is kept out,
// at worst leaving the result larger than it could be.
//
// The order: the episodes whose keys the violations name, alone, then
// every episode up to the last of them; then, in the episode kept, each
// step that is neither its hold, contend, release nor heal, dropped one at
// a time (a step whose removal loses the violation is put back).
func ShrinkFuzz(ctx context.Context, sc ShrinkConfig) (FuzzSchedule, error) {
	if sc.Progress == nil {
		sc.Progress = func(string) {}
	}
	attempts := 0
	reproduces := func(s FuzzSchedule) (bool, error) {
		attempts++
		n := len(s.Episodes())
		res, err := RunFuzz(ctx, FuzzConfig{
			Schedule: s, Control: sc.Control, StopAtFind: true, Logf: sc.Logf,
			Duration: fuzzOverhead + time.Duration(n)*fuzzEpisodeBudget(DaemonConfig{}.withDefaults().MaxTTL) + 10*time.Second,
		})
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		ok := err == nil && res.ControlFound
		sc.Progress(fmt.Sprintf("rerun %d: %d episodes, %d steps: %s", attempts, n, len(s.Steps), map[bool]string{true: "reproduces", false: "does not reproduce"}[ok]))
		return ok, nil
	}
	cur := sc.Schedule
	var found []int
	for _, e := range sc.Found.FoundEpisodes {
		if sc.Control.Attributes(sc.Found.EpisodeFaults[e]) {
			found = append(found, e)
		}
	}
	if len(found) > 0 {
		var cands [][]int
		for _, e := range found {
			cands = append(cands, []int{e})
		}
		var upTo []int
		for _, e := range sc.Schedule.Episodes() {
			if e <= slices.Max(found) {
				upTo = append(upTo, e)
			}
		}
		cands = append(cands, upTo)
		for _, eps := range cands {
			if attempts >= sc.Attempts {
				return cur, nil
			}
			cand := sc.Schedule.Only(eps, nil)
			ok, err := reproduces(cand)
			if err != nil {
				return cur, err
			}
			if ok {
				cur = cand
				break
			}
		}
	}
	if len(cur.Episodes()) != 1 {
		return cur, nil
	}
	for i := 0; i < len(cur.Steps) && attempts < sc.Attempts; {
		switch cur.Steps[i].Op {
		case opHold, opContend, opRelease, opHeal:
			i++
			continue
		}
		cand := cur
		cand.Steps = slices.Delete(slices.Clone(cur.Steps), i, i+1)
		ok, err := reproduces(cand)
		if err != nil {
			return cur, err
		}
		if ok {
			cur = cand
		} else {
			i++
		}
	}
	return cur, nil
}

// ReproTest returns a Go test for package chaos (a file of its own in
// chaos/) that replays s: with the control's guards off it must find a
// safety violation; with every guard on (the twin) it must find none. It
// is the fuzzer's finding written as a drill row with its control, the
// way the matrix pairs them.
func ReproTest(s FuzzSchedule, ctl *FuzzControl) string {
	name := fmt.Sprintf("TestFuzzRepro%d", s.Seed)
	control := "none"
	if ctl != nil {
		control = ctl.Name
	}
	lit := strings.ReplaceAll(s.GoLiteral(), "chaos.", "")
	var b strings.Builder
	fmt.Fprintf(&b, `package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// %s replays a schedule the fault fuzzer found and shrank (seed %d,
// control %s): %d episode(s), %d steps.
func %s(t *testing.T) {
	schedule := %s
	run := func(t *testing.T, control string) *FuzzResult {
		ctl, err := FindFuzzControl(control)
		require.NoError(t, err)
		res, err := RunFuzz(context.Background(), FuzzConfig{Schedule: schedule, Control: ctl, StopAtFind: true, Duration: 90 * time.Second, Logf: t.Logf})
		require.NoError(t, err)
		t.Log(res.Summary())
		return res
	}
`, name, s.Seed, control, len(s.Episodes()), len(s.Steps), name, lit)
	if ctl != nil {
		fmt.Fprintf(&b, `	t.Run("control %s", func(t *testing.T) {
		assert.True(t, run(t, %q).ControlFound, "with its guards off the schedule must produce a safety violation (a second holder, or a fence issued again)")
	})
`, ctl.Name, ctl.Name)
	}
	b.WriteString(`	t.Run("every guard on", func(t *testing.T) {
		assert.Empty(t, run(t, "none").Found)
	})
}
`)
	if src, err := format.Source([]byte(b.String())); err == nil {
		return string(src)
	}
	return b.String()
}
