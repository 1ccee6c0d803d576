package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/chaos"
)

func drillCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("drill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("target", "local", "where to drill: local (redis-server processes, proxies and daemons started here) or compose (the running docker-compose deployment)")
	scenario := fs.String("scenario", "all", "comma-separated scenario names, or all")
	duration := fs.Duration("duration", 10*time.Second, "length of each workload scenario (the fault is in force over its middle half); at least 3×ttl")
	ttl := fs.Duration("ttl", time.Second, "TTL of the workload's locks, whole seconds")
	clients := fs.Int("clients", 6, "contending clients")
	keys := fs.Int("keys", 3, "keys they contend for")
	via := fs.String("via", "mixed", "how clients take locks: mixed (library and HTTP), lib or http")
	seed := fs.Uint64("seed", 0, "random seed (0: from the clock; the report records it)")
	out := fs.String("out", "chaos-report", "directory for report.md, report.json, index.html and the timelines")
	list := fs.Bool("list", false, "list the scenarios and exit")
	verbose := fs.Bool("v", false, "log every fault and heal as it happens")
	var co chaos.DockerOptions
	fs.StringVar(&co.Project, "compose-project", "redlockd", "compose: project name (the Makefile's COMPOSE_PROJECT)")
	daemons := fs.String("compose-daemons", "http://127.0.0.1:7071,http://127.0.0.1:7072", "compose: the daemons' URLs on this host, one per view")
	fs.StringVar(&co.APIKey, "compose-api-key", "compose-demo-key-0123456789abcdef", "compose: API key of the daemons (docker/redlockd.compose.yaml)")
	fs.StringVar(&co.Account, "compose-account", "demo", "compose: the account that API key belongs to")
	fs.DurationVar(&co.PerMasterTimeout, "compose-per-master-timeout", 50*time.Millisecond, "compose: the daemons' per_master_timeout (the drill's library clients use it too)")
	healthInterval := fs.Duration("compose-health-interval", time.Second, "compose: the daemons' health_interval (the drill's library clients use it too)")
	maxTTL := fs.Duration("compose-max-ttl", 5*time.Second, "compose: the daemons' max_ttl (REDLOCKD_MAX_TTL in docker/chaos.compose.yml), their quarantine length")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: redlock-chaos drill [flags]\n\nRuns the fault drills of package chaos: for each scenario, a contention workload\n(library and HTTP clients writing to a fenced resource) while masters are killed,\npaused, partitioned, slowed, restarted empty or clock-skewed; then checks the\nhistory (I1-I6, porcupine) and writes a report. Exits non-zero on any unexpected\nviolation, or when a negative control fails to catch its violation.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("drill: unexpected argument %q", fs.Arg(0))
	}
	if *list {
		for _, sc := range chaos.Matrix() {
			fmt.Fprintf(stdout, "%-28s %s\n", sc.Name, sc.Summary)
		}
		return nil
	}
	scenarios, err := chaos.Find(strings.Split(*scenario, ",")...)
	if err != nil {
		return err
	}
	cfg := chaos.Config{Duration: *duration, TTL: *ttl, Clients: *clients, Keys: *keys, Via: *via, Seed: *seed}
	if *verbose {
		cfg.Logf = func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
	} else {
		cfg.Logf = func(format string, args ...any) {
			if strings.HasPrefix(format, "scenario ") {
				fmt.Fprintf(stderr, format+"\n", args...)
			}
		}
	}
	redis.SetLogger(quietRedis{}) // dial errors to killed masters are the point

	var targets chaos.TargetFunc
	switch *target {
	case "local":
		targets = func(context.Context) (chaos.Target, func() error, error) {
			t, err := chaos.NewProcessTarget(chaos.ProcessOptions{ClockShim: true, Logf: cfg.Logf})
			if err != nil {
				return nil, nil, err
			}
			return t, t.Close, nil
		}
	case "compose":
		co.Daemons = strings.Split(*daemons, ",")
		co.Logf = cfg.Logf
		// The drill's own library clients are configured like the daemons
		// (per-master timeout, health interval), but allow TTLs of 8s: a
		// fresh container takes seconds to start here, and a lock must
		// outlive that in the restart-empty rows.
		cfg.Client = chaos.DaemonConfig{PerMasterTimeout: co.PerMasterTimeout, HealthInterval: *healthInterval, MaxTTL: max(*maxTTL, 8*time.Second)}
		t, err := chaos.NewDockerTarget(ctx, co)
		if err != nil {
			return err
		}
		defer t.Close()
		targets = func(context.Context) (chaos.Target, func() error, error) { return t, func() error { return nil }, nil }
	default:
		return fmt.Errorf("drill: --target %q: want local or compose", *target)
	}

	rep, err := chaos.RunMatrix(ctx, cfg, scenarios, targets, *out)
	if rep != nil {
		if werr := rep.Write(*out); werr != nil {
			err = errors.Join(err, werr)
		}
		fmt.Fprint(stdout, rep.Table())
		fmt.Fprintf(stdout, "\nreport: %s/report.md, %s/report.json, timelines: %s/index.html\n", *out, *out, *out)
	}
	if err != nil {
		return err
	}
	if !rep.OK() {
		return errors.New("drill: unexpected violations, or a negative control that did not catch its violation (see the report)")
	}
	return nil
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}
