package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/chaos"
)

func fuzzCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fuzz", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seed := fs.Uint64("seed", 0, "schedule seed (0: a random one, printed)")
	duration := fs.Duration("duration", 2*time.Minute, "budget of each run: start, episodes, heal, sweep and check (at least 40s)")
	masters := fs.Int("masters", 5, "masters N (faults on at most N − quorum per episode)")
	control := fs.String("control", "none", "turn guards off in the drill's library clients: none, or a negative control ("+controlNames()+")")
	runs := fs.Int("runs", 1, "runs, one seed after the other (seed, seed+1, ...); stops at the first finding (0: as many as --total allows)")
	total := fs.Duration("total", 0, "with --runs 0: run seed after seed while a whole run of --duration still fits in this much time (make fuzz-faults DURATION=1h)")
	replay := fs.String("replay", "", "run the schedule in this JSON file (written by an earlier run) instead of drawing one")
	shrink := fs.Int("shrink", 12, "on a finding, at most this many reruns to shrink the schedule (0: do not shrink)")
	out := fs.String("out", "fuzz-report", "directory for the schedule, the result, the timeline, and a shrunk reproduction as a Go test")
	printOnly := fs.Bool("print", false, "print the schedule the seed names and exit")
	verbose := fs.Bool("v", false, "log every step, fault and heal as it happens")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: redlock-chaos fuzz [flags]\n\nRuns a seeded random schedule of client operations (acquire, acquire with wait,\nextend longer and shorter, release, status) and faults (kill, pause, blackhole,\nlatency, FLUSHALL/FLUSHDB/SWAPDB, DEL of bookkeeping keys, eviction, CONFIG\nRESETSTAT, rollbacks by SWAPDB, DEBUG RELOAD (one with every client stopped\nacross it, after a fence written to three masters only), REPLICAOF and an older\nRDB, clock jumps (one with every client stopped across it, one of 150 ms that a\ncontender at ten times A's drift factor misses) and rates, daemon restarts, a\nsecond daemon with other settings) and operator actions (config reloads, repair-fences just\nafter a rollback) against real redis-server masters on loopback, never more\nthan N − quorum masters at a time, and checks the history. The same seed draws\nthe same schedule. Exits non-zero when it finds a safety violation (with every\nguard on), or when a negative control finds none.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("fuzz: unexpected argument %q", fs.Arg(0))
	}
	if *duration < 40*time.Second {
		return fmt.Errorf("fuzz: --duration %v: at least 40s (a run starts masters and daemons, and every episode waits out a quarantine)", *duration)
	}
	if *masters < 3 || *masters > 9 {
		return fmt.Errorf("fuzz: --masters %d: between 3 and 9", *masters)
	}
	ctl, err := chaos.FindFuzzControl(*control)
	if err != nil {
		return err
	}
	if ctl != nil && ctl.Unreached != "" {
		fmt.Fprintf(stderr, "fuzz: control %s is not expected to be found: %s\n", ctl.Name, ctl.Unreached)
	}
	if *seed == 0 {
		*seed = rand.Uint64() >> 1
	}
	logf := func(format string, args ...any) {
		if *verbose || strings.HasPrefix(format, "scenario ") {
			fmt.Fprintf(stderr, format+"\n", args...)
		}
	}
	redis.SetLogger(quietRedis{})
	if !*printOnly { // --print writes nothing
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return err
		}
	}
	if *runs == 0 && *total < *duration {
		return fmt.Errorf("fuzz: --runs 0 needs a --total of at least --duration (%v)", *duration)
	}
	began := time.Now()
	agg := aggregate{pairs: map[string]bool{}}
	defer func() {
		if agg.runs > 1 {
			fmt.Fprintln(stdout, agg.summary(time.Since(began)))
		}
	}()
	for run := 0; *runs == 0 || run < *runs; run++ {
		if *runs == 0 && time.Since(began)+*duration > *total {
			break
		}
		var sched chaos.FuzzSchedule
		if *replay != "" {
			b, err := os.ReadFile(*replay)
			if err != nil {
				return err
			}
			if err := json.Unmarshal(b, &sched); err != nil {
				return fmt.Errorf("fuzz: --replay %s: %w", *replay, err)
			}
		} else {
			sched = chaos.GenerateFuzzSchedule(*seed+uint64(run), *masters, chaos.EpisodesFor(*duration))
		}
		fmt.Fprintf(stdout, "fuzz: seed %d (replay: redlock-chaos fuzz --seed %d --masters %d --duration %v --control %s)\n", sched.Seed, sched.Seed, sched.Masters, *duration, *control)
		fmt.Fprint(stdout, sched.String())
		if *printOnly {
			continue
		}
		dir := filepath.Join(*out, fmt.Sprintf("seed-%d", sched.Seed))
		if err := writeJSON(filepath.Join(dir, "schedule.json"), sched); err != nil {
			return err
		}
		res, err := chaos.RunFuzz(ctx, chaos.FuzzConfig{Schedule: sched, Duration: *duration, Control: ctl, Out: dir, Logf: logf, StopAtFind: ctl != nil || *runs != 1})
		if res != nil {
			for _, e := range res.EpisodeErrors {
				fmt.Fprintf(stdout, "  episode cut short: %s\n", e)
			}
			for _, v := range res.Found {
				fmt.Fprintf(stdout, "  %s %s: %s\n", v.Invariant, v.Key, v.Detail)
			}
			fmt.Fprintln(stdout, res.Summary())
			agg.add(res)
			fmt.Fprintf(stdout, "  fault pairs: %s\n", strings.Join(res.Pairs, " "))
			if werr := writeJSON(filepath.Join(dir, "result.json"), res); werr != nil {
				err = errors.Join(err, werr)
			}
		}
		if err != nil {
			return err
		}
		if !res.ControlFound {
			continue
		}
		if *shrink > 0 {
			fmt.Fprintf(stdout, "shrinking (at most %d reruns)...\n", *shrink)
			small, serr := chaos.ShrinkFuzz(ctx, chaos.ShrinkConfig{Schedule: sched, Found: res, Control: ctl, Attempts: *shrink, Logf: logf,
				Progress: func(s string) { fmt.Fprintln(stdout, "  "+s) }})
			if serr != nil {
				fmt.Fprintf(stdout, "shrinking stopped: %v\n", serr)
			}
			path := filepath.Join(dir, "repro_test.go.txt")
			if werr := os.WriteFile(path, []byte(chaos.ReproTest(small, ctl)), 0o644); werr != nil {
				return werr
			}
			if werr := writeJSON(filepath.Join(dir, "shrunk.json"), small); werr != nil {
				return werr
			}
			fmt.Fprint(stdout, "shrunk "+small.String())
			// The schedule does not carry the control: the replay line
			// names it (replayed without, every guard is on and a
			// control's finding is not there: a black-box pass).
			fmt.Fprintf(stdout, "reproduction: %s (a Go test for chaos/), or: %s\n", path, replayLine(filepath.Join(dir, "shrunk.json"), ctl))
		}
		if ctl == nil {
			return fmt.Errorf("fuzz: seed %d found a safety violation with every guard on", sched.Seed)
		}
		fmt.Fprintf(stdout, "negative control %s: found, as it must\n", ctl.Name)
		return nil
	}
	if ctl != nil && !*printOnly {
		return controlMissed(ctl, agg.found)
	}
	return nil
}

// replayLine is the command that replays a shrunk schedule: with the
// control's flag, which the schedule does not carry (replayed without it,
// every guard is on and a control's finding is not there: a black-box
// pass).
func replayLine(path string, ctl *chaos.FuzzControl) string {
	line := "redlock-chaos fuzz --replay " + path
	if ctl != nil {
		line += " --control " + ctl.Name
	}
	return line
}

// controlMissed is the error of a control run that did not show its bug;
// found is how many violations it found in episodes its guards are not
// about (the summary says so): not "none found" then (a black-box pass
// read the two lines as contradicting each other).
func controlMissed(ctl *chaos.FuzzControl, found int) error {
	if found > 0 {
		return fmt.Errorf("fuzz: negative control %s: %d safety violation(s) found, none in an episode its guards are about: the control did not show its bug", ctl.Name, found)
	}
	return fmt.Errorf("fuzz: negative control %s: no safety violation found", ctl.Name)
}

func controlNames() string {
	var names []string
	for _, c := range chaos.FuzzControls() {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ")
}

func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// aggregate sums the runs of one invocation for its closing line.
type aggregate struct {
	runs, episodes, faults int
	found                  int // violations found, credited to the control or not
	pairs                  map[string]bool
}

func (a *aggregate) add(r *chaos.FuzzResult) {
	a.runs++
	a.episodes += r.Episodes
	a.faults += r.Faults
	a.found += len(r.Found)
	for _, p := range r.Pairs {
		a.pairs[p] = true
	}
}

func (a *aggregate) summary(elapsed time.Duration) string {
	mins := max(elapsed.Minutes(), 1.0/60)
	return fmt.Sprintf("fuzz: %d runs in %v: %d episodes (%.1f schedules/min), %d faults (%.1f faults/min), %d distinct fault pairs",
		a.runs, elapsed.Round(time.Second), a.episodes, float64(a.episodes)/mins, a.faults, float64(a.faults)/mins, len(a.pairs))
}
