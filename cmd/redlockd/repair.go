package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redlockd/redlockd/config"
	"github.com/redlockd/redlockd/redlock"
)

const repairUsage = `Usage: redlockd repair-fences (--masters HOST:PORT,… | --config FILE) [--max-ttl SECONDS] [--min N] [--margin N] [--allow-missing] [--dry-run]

The masters come from --masters, REDLOCKD_MASTERS or the config file;
either is enough.

After more than half of the masters lost their data (restarted without
persistence), no quorum kept the fencing counter, and the daemons keep those
masters out ("repairing" in /readyz) and refuse locks: they fail closed. This
command is the way back. It reads the fencing counter (KEY_PREFIX + "fence")
on every master, raises it everywhere to

    max(highest found + margin, min + 1)

and writes the marker (KEY_PREFIX + "marker") "repaired <time> … operator"
on the masters that lost their data, each named with the reason: their
marker, lease horizon or counter is missing, or their counter is below the
highest found (they may have rolled back to an older copy of their data;
the daemons raise every intact master's counter to the highest each health
interval, so only a master that lags a lock granted while this runs is
taken for one by mistake, and stays out too: the safe side). The masters
it finds intact get "repaired <time> … kept": no quarantine, and they keep
answering for idempotency records (a master whose earlier repair ended a
loss gets a plain repair marker instead, and waits out the records'
retention from this repair).
Running daemons accept the repair at their next probe and count each
repaired master once the longest max TTL has passed after the repair (locks
it lost may be valid until then): max_ttl given here, the longest a client
registered on the masters, or a daemon's own max_ttl if longer (the
registry goes with the data when every master is wiped); daemons started
later do the same. Without --max-ttl, a config file or REDLOCKD_MAX_TTL, it
takes the longest max TTL the clients registered on the masters, and
refuses (nothing written) when none is registered. A repair never shortens
a stay: a run says which masters stay out longer, from an earlier run.

The newest fence may have lived only on the masters that lost their data.
The daemons copy the highest counter to every master each health interval,
so the default margin (1,000,000) covers the fences granted in one interval;
--min, the highest fence your protected resource accepted, is the certain
bound when you know it, and is required when no master kept its counter
(every master lost its data: a repair from 0 could send fences back). Every
master must answer unless --allow-missing (then a quorum), because one that
is down may hold the highest counter.

It uses only masters, key_prefix, max_ttl and how to reach the masters
(master_username, master_password or master_password_file, master_tls and
the master_tls_* files) from its flags, REDLOCKD_* or the config file (the other
settings are not checked; no API key is needed). A master that refuses
the credentials or TLS stops it before anything is written. Flags:
`

// repairSettings are the settings repair-fences uses: how to reach the
// masters (config.MasterSettings), key_prefix and max_ttl.
// master_password has no flag (argv is visible to every local user).
var repairSettings = append([]string{"key_prefix", "max_ttl"}, config.MasterSettings...)

// repairFences runs `redlockd repair-fences`.
func repairFences(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("repair-fences", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the daemons' YAML config file (masters, master_password, key_prefix)")
	min := fs.Int64("min", 0, "raise every fencing counter to at least min+1 (e.g. the highest fence your resource accepted)")
	margin := fs.Int64("margin", redlock.DefaultRepairMargin, "added to the highest counter found (the target is at most 2^53-1-2^40: fences stay exact in Lua and JSON, and 2^40 are left)")
	allowMissing := fs.Bool("allow-missing", false, "repair when only a quorum of the masters answers")
	dryRun := fs.Bool("dry-run", false, "read and report; write nothing")
	timeout := fs.Duration("timeout", 2*time.Second, "per-master timeout of each command")
	var cfg config.Config
	cfg.RegisterFlagsFor(fs, repairSettings...)
	fs.Usage = func() {
		fmt.Fprint(stderr, repairUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("repair-fences: unexpected argument %q", fs.Arg(0))
	}
	switch {
	case *min < 0:
		return fmt.Errorf("repair-fences: --min must be ≥ 0, got %d", *min)
	case *margin < 1:
		return fmt.Errorf("repair-fences: --margin must be ≥ 1, got %d", *margin)
	case *timeout <= 0:
		return fmt.Errorf("repair-fences: --timeout must be > 0, got %v", *timeout)
	}
	cfg, err := config.LoadFor(*path, os.LookupEnv, fs, repairSettings...)
	if err != nil {
		return err
	}
	if len(cfg.Masters) == 0 && len(cfg.MasterGroups) > 0 {
		// Each group keeps its own fencing counters: one repair per group.
		names := make([]string, len(cfg.MasterGroups))
		for i, g := range cfg.MasterGroups {
			names[i] = g.Name
		}
		return fmt.Errorf("repair-fences: the config has master_groups (%s): each group keeps its own fencing counters; run repair-fences once per group, without --config: --masters listing that group's masters, with --key-prefix, --max-ttl and the master password and TLS flags (or REDLOCKD_* variables) the config gives", strings.Join(names, ", "))
	}
	masters, _, err := masterOptions(cfg)
	if err != nil {
		return fmt.Errorf("repair-fences: %w", err)
	}
	if _, err := checkMasterAccess(ctx, masters, nil, ""); err != nil {
		return fmt.Errorf("repair-fences: nothing written: %w", err)
	}
	opts := redlock.RepairOptions{
		FenceKey:     cfg.KeyPrefix + "fence",
		MarkerKey:    cfg.KeyPrefix + "marker",
		Margin:       *margin,
		Min:          *min,
		AllowMissing: *allowMissing,
		DryRun:       *dryRun,
		Timeout:      *timeout,
		MaxTTL:       time.Duration(cfg.MaxTTL) * time.Second,
	}
	_, envMaxTTL := os.LookupEnv("REDLOCKD_MAX_TTL")
	if *path == "" && !envMaxTTL && !flagGiven(fs, "max-ttl") {
		// No max_ttl given: the serve default (a day) would keep the
		// masters that lost their data out for a day, and a run with the
		// right value cannot shorten that (a newcomer's pass). The
		// longest max TTL the clients registered on the masters is what
		// they use; without one, ask.
		read := opts
		read.DryRun = true
		res, err := redlock.RepairFences(ctx, masters, read)
		switch {
		case err != nil:
			// The run below refuses the same way, and says why.
		case res.RegisteredMaxTTL <= 0:
			return fmt.Errorf("repair-fences: give --max-ttl SECONDS, the daemons' max_ttl: no client registered its max TTL on the masters that answered (the registry goes with the data), and the masters that lost their data stay out that long after the repair (a repair never shortens it); nothing written")
		default:
			opts.MaxTTL = res.RegisteredMaxTTL
			fmt.Fprintf(stdout, "max TTL: %v, the longest the clients registered on the masters (--max-ttl not given)\n", opts.MaxTTL)
		}
	}
	res, err := redlock.RepairFences(ctx, masters, opts)
	if res != nil {
		printRepair(stdout, res, *dryRun && err == nil)
	}
	if err != nil {
		if errors.Is(err, redlock.ErrQuorumUnavailable) {
			return fmt.Errorf("repair-fences: nothing written: %w", err)
		}
		return fmt.Errorf("repair-fences: %w", err)
	}
	if *dryRun {
		fmt.Fprintf(stdout, "dry run: nothing written; without --dry-run every counter would be raised to %d\n", res.Target)
	} else {
		fmt.Fprintf(stdout, "repaired: every answering master's fencing counter is ≥ %d and carries the repair marker\n", res.Target)
	}
	lost := 0
	for _, m := range res.Masters {
		if m.Answered && m.Lost != "" {
			lost++
		}
	}
	printStayOut(stdout, opts.MaxTTL, res.RegisteredMaxTTL, lost, *dryRun)
	for _, m := range res.Masters {
		if m.Stay > max(opts.MaxTTL, res.RegisteredMaxTTL)+time.Second {
			fmt.Fprintf(stdout, "master %d (%s) stays out %v after this repair: an earlier repair's quarantine ends later, and a repair never shortens one\n", m.Index, m.Addr, m.Stay.Round(time.Second))
		}
	}
	return nil
}

// flagGiven reports whether the flag name was set on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// printStayOut says how long the masters that lost their data stay out
// after the repair: locks they lost may be valid until the longest max TTL
// of any client has passed.
// lost is how many masters the run found lost (or that may have): with
// none, the stay is said of the masters a running daemon already holds out
// as repairing (a black-box pass read "masters that lost their data would
// stay out" on a healthy deployment as a finding of this run).
func printStayOut(w io.Writer, maxTTL, registered time.Duration, lost int, dry bool) {
	verb := "stay"
	if dry {
		verb = "would stay"
	}
	registeredText := "none registered"
	if registered > 0 {
		registeredText = registered.String()
	}
	who := "masters that lost their data"
	if lost == 0 {
		who = "every master read here kept its data, so this repair quarantines none; masters a running daemon holds out as repairing (GET /readyz)"
	}
	fmt.Fprintf(w, "%s %s out for %v after the repair: the longer of max_ttl %v and the longest max TTL registered on the masters (%s); each running daemon keeps them out at least its own max_ttl after the repair\n",
		who, verb, max(maxTTL, registered), maxTTL, registeredText)
}

func printRepair(w io.Writer, res *redlock.RepairResult, dry bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MASTER\tADDR\tCOUNTER BEFORE\tAFTER\tMARKER FOUND\tRESULT")
	for _, m := range res.Masters {
		result := "ok"
		switch {
		case m.Err != nil:
			result = m.Err.Error()
		case dry:
			result = "dry run"
		case m.After == m.Before && m.Before < res.Target:
			result = "not written"
		}
		before, after, marker := "-", "-", m.Marker
		switch {
		case m.Answered && dry:
			// What a repair would write.
			before, after = fmt.Sprint(m.Before), fmt.Sprint(max(m.Before, res.Target))
		case m.Answered:
			before, after = fmt.Sprint(m.Before), fmt.Sprint(m.After)
		}
		if marker == "" {
			marker = "(none)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", m.Index, m.Addr, before, after, marker, result)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "%d of %d masters read; the highest counter among them is %d; target %d\n", res.Answered, len(res.Masters), res.Highest, res.Target)
	verb := "quarantined"
	if dry {
		verb = "would be quarantined"
	}
	for _, m := range res.Masters {
		if m.Answered && m.Lost != "" {
			fmt.Fprintf(w, "master %d (%s) lost its data or may have (%s): %s like one that did\n", m.Index, m.Addr, m.Lost, verb)
		}
	}
}
