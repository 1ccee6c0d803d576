package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/agnivade/levenshtein"
	"syscall"
	"time"

	"github.com/redlockd/redlockd/client"
)

// Exit codes of `redlockd lock`. A command run by `lock run` passes its
// own status through (128+N when killed by signal N), so these are chosen
// from sysexits.h, away from the statuses commands commonly use.
const (
	exitUsage       = 64  // bad flags, missing URL or API key, 400 or 401 from the daemon
	exitUnavailable = 69  // 503 (no quorum) or the daemon could not be reached
	exitInternal    = 70  // an unexpected answer (500, not the JSON envelope)
	exitBusy        = 75  // acquire: the lock is held by another owner (as flock -n)
	exitNotHeld     = 76  // extend/release: the token does not hold the lock; status: not held
	exitLimited     = 77  // 429: an account limit (quota, rate, max_locks) or the waiter cap refused the call
	exitLost        = 78  // run: the lock was lost while the command ran; the command was stopped
	exitGateClosed  = 125 // lock-exec: lock run ended before opening the start gate (gate.go)
	exitCannotExec  = 126
	exitNotFound    = 127
)

// exitError ends the process with code; main prints msg (when not empty).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func exitf(code int, format string, args ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}

const lockUsage = `Usage:
  redlockd lock run --key K --ttl 5m [--wait 30s] [--namespace N] [--grace 10s] [--permits P] [--lock-delay D] -- command [args...]
  redlockd lock acquire --key K [--ttl 30s] [--wait 0s] [--namespace N] [--permits P] [--lock-delay D]
  redlockd lock extend  --key K --token T [--ttl 30s] [--namespace N] [--slot S]
  redlockd lock release --key K --token T [--namespace N] [--slot S]
  redlockd lock status  --key K [--namespace N] [--permits P]
  (each takes --keys K1,K2,... instead of --key K: a multi-key lock)

The daemon and API key come from --url and --api-key, or from REDLOCKD_URL
and REDLOCKD_API_KEY (prefer the variable: a flag shows in ps). --token
defaults to REDLOCK_TOKEN. For a daemon serving HTTPS (an https:// URL),
--tls-ca (REDLOCKD_TLS_CA) names the PEM file of the CA that signed its
certificate (default: the system's CAs), and --tls-cert and --tls-key
(REDLOCKD_TLS_CERT, REDLOCKD_TLS_KEY) a client certificate for a daemon
that requires one (tls_client_ca_file).

run acquires the lock, starts the command with REDLOCK_KEY, REDLOCK_NAMESPACE,
REDLOCK_FENCE (the fencing token) and REDLOCK_VALID_UNTIL (Unix seconds, the
validity at start) in its environment, besides lock run's own, extends the lock at about a third of the TTL
while the command runs, and releases it when the command exits. If the lock
is lost (an extend refused, or validity about to end unconfirmed), the
command's process group gets SIGTERM, then SIGKILL after --grace or when
the validity ends, whichever is sooner (a command that ignores SIGTERM gets
at most the validity left: about 1 s, a tenth of the TTL when shorter; none
after a refused extend, when the lock is already gone or another owner's:
SIGKILL follows at once), or as soon as the command itself exited; the
reason is printed on stderr.
When the command exits, whatever it left running in its process group is
killed before the lock is released (after a loss that release only cleans
up, and lock run waits at most 2 s for it; otherwise at most until the
lock's validity ends, when nothing is left to release). SIGINT, SIGTERM and the other
forwarded signals do not make lock run escalate: a command that ignores
them keeps running and keeps the lock; kill lock run with SIGKILL (its
guardian then kills the group) or signal the command's group. If lock run itself is killed (even
with SIGKILL), a guardian process kills the command's process group at once
(the command starts only once the guardian watches its group; on Linux it
also has a parent-death signal); if lock run is
stopped or hung, the guardian kills the group when the validity ends.
SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are forwarded to the
command's process group. Job control is not supported: Ctrl-Z stops the
command but not lock run, which keeps the lock and the terminal until the
command is continued (kill -CONT PID from another terminal). The command runs in a process
group of its own so that all it started can be stopped; when lock run is
the terminal's foreground job, that group becomes the foreground (the
command reads the terminal, and Ctrl-C reaches it directly).

--permits P makes K a semaphore: run and acquire take one of its P permits
(at most P holders at once, each with its own token, fence and TTL; run
adds REDLOCK_SLOT to the command's environment, acquire prints "slot"),
extend and release act on the permit --slot S, and status prints the
permits taken ("held" when all P are).

--keys K1,K2,... (instead of --key) takes a multi-key lock: every key of
the set or none, under one token and one fence, for 1 to 64 different
keys separated by commas (a key with a comma in it cannot be given here).
run holds the whole set while the command runs and adds REDLOCK_KEYS (the
keys, comma-separated) to its environment, REDLOCK_KEY being the first;
extend, release and status act on the same set, in any order. Nothing is
held while waiting, so runs asking for overlapping sets in different
orders cannot deadlock. It cannot be combined with --permits or --slot.

--lock-delay D (run, acquire): if the lock ends without a release (lock
run killed with SIGKILL, its host paused), nobody acquires it for D after
it ends, so that a stalled holder can notice before the next one starts.
A release ends the delay at once. Without it the account's default
lock_delay applies (none unless configured); --lock-delay 0s asks for none.

acquire, extend, release and status print the answer's data object as JSON
on stdout (acquire's includes the token) and exit with:

  0    acquired / extended / released / held; run: the command's own status
       (128+N when signal N killed it, or ended the wait for the lock;
       acquire: 128+N too when signal N ends its wait, nothing held)
  64   usage: bad flags, missing URL or API key, refused as bad input (400)
       or unauthorized (401)
  69   unavailable: no quorum of masters (503) or the daemon unreachable
  70   an unexpected answer (500, not JSON)
  75   busy: the lock is held by another owner (run: the command did not run);
       run: also when the lock it obtained ended before the command could
       start (run stopped or starved while the daemon granted it);
       acquire: when it ended before it could be printed (nothing held)
  76   not held: extend/release with a token that does not hold the lock;
       status of a lock nobody holds, or with --permits of a semaphore
       with a permit free ("taken" says how many are taken)
  77   limited: an account limit (quota, rate, max_locks) or the waiter
       cap refused the call (429); retry later (a 429 for too many failed
       authentications exits 64, as the 401s before it)
  78   run: the lock was lost while the command ran; it was stopped
  126  run: the command could not be executed; 127: not found

Each subcommand's flags: redlockd lock SUBCOMMAND --help.
`

// lockFlags are the flags shared by every lock subcommand.
type lockFlags struct {
	url, apiKey, key, namespace, token string
	keys                               []string // --keys: a multi-key lock's; nil for --key
	tlsCA, tlsCert, tlsKey             string
	ttl, wait, grace                   time.Duration
	lockDelay                          time.Duration
	permits                            int             // run, acquire, status: a semaphore's
	slot                               int             // extend, release: a permit's slot; -1 for a lock
	set                                map[string]bool // the flags given on the command line
}

// repeatedFlag returns the name of the first flag of fs given more than
// once in args (up to "--" or the first argument that is not a flag, as
// flag.Parse reads them), or "".
func repeatedFlag(fs *flag.FlagSet, args []string) string {
	seen := map[string]bool{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || a == "-" || !strings.HasPrefix(a, "-") {
			return ""
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		fl := fs.Lookup(name)
		if fl == nil {
			return ""
		}
		if seen[name] {
			return name
		}
		seen[name] = true
		if bf, ok := fl.Value.(interface{ IsBoolFlag() bool }); !hasValue && !(ok && bf.IsBoolFlag()) {
			i++ // the flag's value is the next argument
		}
	}
	return ""
}

// lockSubcommands are lock's subcommands, for didYouMean.
var lockSubcommands = []string{"run", "acquire", "extend", "release", "status"}

// didYouMean returns ` (did you mean "X"?)` for the one of known nearest
// to word (at most two edits, or word a prefix of it), else "".
func didYouMean(word string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		d := levenshtein.ComputeDistance(word, k)
		if strings.HasPrefix(k, word) && word != "" {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func lockCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, lockUsage)
		return exitf(exitUsage, "lock: missing subcommand (run, acquire, extend, release or status)")
	}
	sub := args[0]
	switch sub {
	case "run", "acquire", "extend", "release", "status":
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, lockUsage)
		return nil
	default:
		// One line, not the whole usage above the error (a typo is the
		// usual cause): the nearest subcommand, and where the usage is.
		return exitf(exitUsage, "lock: unknown subcommand %q%s; see redlockd lock --help", sub, didYouMean(sub, lockSubcommands))
	}
	fs := flag.NewFlagSet("lock "+sub, flag.ContinueOnError)
	// The flag package prints its error and the whole usage on a bad flag;
	// a bad flag gets one line here instead (below), --help the usage.
	fs.SetOutput(io.Discard)
	f := lockFlags{slot: -1} // --slot is extend's and release's only
	fs.StringVar(&f.url, "url", "", "daemon base URL, e.g. http://127.0.0.1:7070 (default $REDLOCKD_URL)")
	fs.StringVar(&f.apiKey, "api-key", "", "API key (default $REDLOCKD_API_KEY)")
	fs.StringVar(&f.key, "key", "", "lock key (this or --keys required)")
	fs.Func("keys", "the `keys` of a multi-key lock, separated by commas (1 to 64 different keys), instead of --key, e.g. acct:a,acct:b", f.setKeys)
	fs.StringVar(&f.namespace, "namespace", "", "namespace within the API key's account")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "PEM `file` of the CA of the daemon's HTTPS certificate (default $REDLOCKD_TLS_CA, else the system's CAs)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM client certificate `file`, for a daemon that requires one (default $REDLOCKD_TLS_CERT)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM `file` of the client certificate's key (default $REDLOCKD_TLS_KEY)")
	switch sub {
	case "run":
		durationVar(fs, &f.ttl, "ttl", 0, "lock TTL, a `duration` in whole seconds (required), e.g. 5m; extended at about ttl/3")
		durationVar(fs, &f.wait, "wait", 0, "wait up to this `duration` for a held lock (at most the daemon's max_wait), e.g. 30s; a daemon that has not answered 2s after it is given up on (exit 69)")
		durationVar(fs, &f.grace, "grace", 10*time.Second, "after a loss, the `duration` between SIGTERM and SIGKILL, cut to the validity left")
	case "acquire":
		durationVar(fs, &f.ttl, "ttl", 30*time.Second, "lock TTL, a `duration` in whole seconds, e.g. 30s")
		durationVar(fs, &f.wait, "wait", 0, "wait up to this `duration` for a held lock, e.g. 30s; a daemon that has not answered 2s after it is given up on (exit 69)")
	case "extend":
		durationVar(fs, &f.ttl, "ttl", 30*time.Second, "new TTL, a `duration` in whole seconds, e.g. 30s")
	}
	switch sub {
	case "run", "acquire", "status":
		if sub != "status" {
			durationVar(fs, &f.lockDelay, "lock-delay", 0, "if the lock ends without a release, nobody acquires it for this `duration` after (at most 60s), e.g. 15s")
		}
		fs.IntVar(&f.permits, "permits", 0, "treat --key as a semaphore of this many permits (1 to 1000); left out: a lock")
	case "extend", "release":
		fs.IntVar(&f.slot, "slot", -1, "the semaphore permit slot acquire returned (0 to 999); -1: a lock")
	}
	if sub == "extend" || sub == "release" {
		fs.StringVar(&f.token, "token", "", "token acquire returned (default $REDLOCK_TOKEN)")
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, lockUsage)
			fmt.Fprintf(stderr, "\nFlags of lock %s:\n", sub)
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return err
		}
		return &exitError{code: exitUsage, err: fmt.Errorf("lock %s: %v (flags: redlockd lock %s --help)", sub, err, sub)}
	}
	if name := repeatedFlag(fs, args[1:]); name != "" {
		// The flag package keeps the last value: --key a --key b would
		// lock b without a word.
		return &exitError{code: exitUsage, err: fmt.Errorf("lock %s: --%s given twice; give each flag once", sub, name)}
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	// The variables are read after the flags, not as the flags' defaults:
	// --help would print them (a URL may carry user info, REDLOCK_TOKEN is
	// a lock's token).
	for _, v := range []struct {
		dst *string
		env string
	}{{&f.url, "REDLOCKD_URL"}, {&f.apiKey, "REDLOCKD_API_KEY"}, {&f.tlsCA, "REDLOCKD_TLS_CA"},
		{&f.tlsCert, "REDLOCKD_TLS_CERT"}, {&f.tlsKey, "REDLOCKD_TLS_KEY"}, {&f.token, "REDLOCK_TOKEN"}} {
		if *v.dst == "" {
			*v.dst = os.Getenv(v.env)
		}
	}
	if err := f.check(sub, fs.NArg()); err != nil {
		return &exitError{code: exitUsage, err: cliWrap(err, "lock "+sub)}
	}
	copts := []client.Option{client.WithUserAgent("redlockd-lock/1")}
	if f.tlsCA != "" || f.tlsCert != "" {
		hc, err := f.httpsClient()
		if err != nil {
			return &exitError{code: exitUsage, err: cliWrap(err, "lock "+sub)}
		}
		copts = append(copts, client.WithHTTPClient(hc))
	}
	c, err := client.New(f.url, f.apiKey, copts...)
	if err != nil {
		return &exitError{code: exitUsage, err: cliWrap(err, "lock "+sub)}
	}
	opts := []client.LockOption{client.WithNamespace(f.namespace), client.WithWait(f.wait)}
	if f.permits > 0 {
		opts = append(opts, client.WithPermits(f.permits))
	}
	if f.slot >= 0 {
		opts = append(opts, client.WithSlot(f.slot))
	}
	if f.set["lock-delay"] {
		// --lock-delay 0s is sent: it opts out of the account's default.
		opts = append(opts, client.WithLockDelay(f.lockDelay))
	}
	if f.keys != nil {
		opts = append(opts, client.WithKeys(f.keys...))
	}
	id := f.lockID()
	switch sub {
	case "run":
		return lockRun(ctx, c, &f, opts, fs.Args(), stderr)
	case "acquire":
		// A signal ends the wait as it ends lock run's: exit 128+N (not
		// 69, "unavailable", which a script would retry), a lock granted
		// in that moment released.
		sigs := make(chan os.Signal, 4)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
		l, sig, err := acquireOrSignal(ctx, c, &f, opts, sigs)
		signal.Stop(sigs)
		if sig != nil {
			if l != nil {
				releaseNow(l, io.Discard)
				return &exitError{code: 128 + int(sig.(syscall.Signal)), err: fmt.Errorf("lock acquire: %v while waiting; the lock granted in that moment was released", sig)}
			}
			if unanswered(err) {
				return &exitError{code: 128 + int(sig.(syscall.Signal)), err: fmt.Errorf("lock acquire: %v while waiting; the daemon did not answer the stop (a lock it granted in that moment is released by it once it runs again, or ends with its TTL)", sig)}
			}
			return &exitError{code: 128 + int(sig.(syscall.Signal)), err: fmt.Errorf("lock acquire: %v while waiting; nothing is held", sig)}
		}
		if err != nil {
			return lockFailed(stdout, "acquire", id, err)
		}
		if !time.Now().Before(l.ValidUntil()) {
			// Granted after a wait, but lock acquire was stopped or
			// starved past the lock's validity before it read the
			// answer: a script given it would work under a lock it no
			// longer holds. Not obtained in time (75), as lock run's.
			releaseNow(l, io.Discard)
			return &exitError{code: exitBusy, err: fmt.Errorf("lock acquire: the lock %v was granted, but its validity ended before it could be handed over (lock acquire stopped or starved while it was answered?); nothing is held", id)}
		}
		return printData(stdout, "acquire", id, "acquired", true, leaseFields(l, true))
	case "extend":
		l, err := c.Extend(ctx, f.key, f.token, f.ttl, opts...)
		if err != nil {
			return slotHint(lockFailed(stdout, "extend", id, err), &f)
		}
		return printData(stdout, "extend", id, "extended", true, leaseFields(l, false))
	case "release":
		if err := c.Release(ctx, f.key, f.token, opts...); err != nil {
			return slotHint(lockFailed(stdout, "release", id, err), &f)
		}
		return printData(stdout, "release", id, "released", true, nil)
	default: // status
		st, err := c.Status(ctx, f.key, opts...)
		if err != nil {
			return lockFailed(stdout, "status", id, err)
		}
		if f.permits > 0 {
			fs := []field{{"permits", int64(st.Permits)}, {"taken", int64(st.Taken)}}
			if st.Taken > 0 {
				fs = append(fs, field{"next_free_ms", st.NextFree.Milliseconds()})
			}
			_ = printData(stdout, "status", id, "held", st.Held, fs)
			if !st.Held {
				return &exitError{code: exitNotHeld}
			}
			return nil
		}
		if !st.Held {
			_ = printData(stdout, "status", id, "held", false, nil)
			return &exitError{code: exitNotHeld}
		}
		now := time.Now()
		v := max(st.ValidUntil.Sub(now), 0)
		// ttl rounded up, at least 1, as the daemon answers: a held lock
		// never shows ttl 0.
		fs := []field{{"ttl", max((v.Milliseconds()+999)/1000, 1)}, {"expire_at", now.Add(v).Unix()}}
		if st.Fence != 0 {
			fs = append(fs, field{"fence", st.Fence})
		}
		return printData(stdout, "status", id, "held", true, append(fs, field{"validity_ms", v.Milliseconds()}))
	}
}

// durationValue is a flag.Value like flag.Duration's, whose error for a
// number without a unit says what is missing (time.ParseDuration says
// "missing unit in duration").
type durationValue struct{ d *time.Duration }

func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(durationValue{p}, name, usage)
}

func (v durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			return fmt.Errorf("durations need a unit, e.g. %ss", s)
		}
		if strings.Contains(err.Error(), "invalid duration") && strings.ContainsAny(s, "hms") {
			return errors.New("out of range or not a duration: use a number with a unit, e.g. 30s, 5m, 1h")
		}
		return errors.New("not a duration: use a number with a unit, e.g. 30s, 5m, 1h")
	}
	*v.d = d
	return nil
}

func (v durationValue) String() string {
	if v.d == nil {
		return "0s"
	}
	return v.d.String()
}

// check validates the flags of subcommand sub with nargs arguments left.
func (f *lockFlags) check(sub string, nargs int) error {
	switch {
	case f.url == "":
		return errors.New("--url or REDLOCKD_URL: required (e.g. http://127.0.0.1:7070)")
	case f.apiKey == "":
		return errors.New("--api-key or REDLOCKD_API_KEY: required")
	case f.key == "" && f.set["key"]:
		// Given but empty (--key "" from an unset shell variable): not
		// "required", which reads as if the flag were missing.
		return errors.New("--key: must not be empty")
	case f.key == "" && f.keys == nil:
		return errors.New("--key or --keys: required")
	case f.key != "" && f.keys != nil:
		return errors.New("--key, --keys: give one of them: --key K for one lock, --keys K1,K2 for a multi-key lock")
	case f.keys != nil && f.permits != 0:
		return errors.New("--keys, --permits: a semaphore has one name: give --key with --permits")
	case f.keys != nil && f.slot != -1:
		return errors.New("--keys, --slot: a slot is a semaphore permit's: give --key with --slot")
	case sub == "run" && f.ttl == 0 && !f.set["ttl"]:
		return errors.New("--ttl: required, at least 1s, e.g. --ttl 5m")
	case (sub == "run" || sub == "acquire" || sub == "extend") && (f.ttl < time.Second || f.ttl%time.Second != 0):
		return fmt.Errorf("--ttl: %v must be a whole number of seconds, at least 1s", f.ttl)
	case f.wait < 0:
		return fmt.Errorf("--wait: %v is negative", f.wait)
	case f.wait%time.Millisecond != 0:
		// wait_ms counts whole milliseconds: 999us would be sent as no
		// wait at all, 1500us as 1ms.
		return fmt.Errorf("--wait: %v must be whole milliseconds, e.g. 30s or 1500ms", f.wait)
	case f.grace < 0:
		return fmt.Errorf("--grace: %v is negative", f.grace)
	case f.lockDelay < 0 || f.lockDelay > time.Minute || f.lockDelay%time.Millisecond != 0:
		return fmt.Errorf("--lock-delay: %v must be whole milliseconds from 0 to 60s", f.lockDelay)
	case f.permits < 0 || f.permits > 1000 || f.permits == 0 && f.set["permits"]:
		// An explicit 0 is refused as the API refuses permits 0, not
		// taken for a lock: leave the flag out for that.
		return fmt.Errorf("--permits: %d is outside 1 to 1000 (leave --permits out for a lock)", f.permits)
	case f.slot < -1 || f.slot > 999:
		return fmt.Errorf("--slot: %d is outside 0 to 999", f.slot)
	case (f.tlsCert == "") != (f.tlsKey == ""):
		return errors.New("--tls-cert and --tls-key (REDLOCKD_TLS_CERT, REDLOCKD_TLS_KEY): give both or neither")
	case (f.tlsCA != "" || f.tlsCert != "") && !strings.HasPrefix(strings.ToLower(f.url), "https://"):
		return errors.New("--tls-ca or --tls-cert (or REDLOCKD_TLS_CA, REDLOCKD_TLS_CERT) given: the URL must start with https://")
	case (sub == "extend" || sub == "release") && f.token == "":
		return errors.New("--token or REDLOCK_TOKEN: required")
	case sub == "run" && nargs == 0:
		return errors.New("missing command: redlockd lock run --key K --ttl 5m -- command [args...]")
	case sub != "run" && nargs > 0:
		return errors.New("unexpected arguments")
	}
	return nil
}

// setKeys parses --keys: keys separated by commas, none empty, none twice.
// The daemon checks the rest (at most 64 keys, each 1 to 512 bytes).
func (f *lockFlags) setKeys(s string) error {
	keys := strings.Split(s, ",")
	for i, k := range keys {
		if k == "" {
			return fmt.Errorf("key %d of %d is empty: separate keys by single commas, e.g. --keys acct:a,acct:b", i+1, len(keys))
		}
		if j := slices.Index(keys[:i], k); j >= 0 {
			return fmt.Errorf("%q is given twice (keys %d and %d): every key of a set must be different", k, j+1, i+1)
		}
	}
	f.keys = keys
	return nil
}

// lockID names the lock of the flags: --key, or --keys with key the
// first of them.
func (f *lockFlags) lockID() lockID {
	if f.keys != nil {
		return lockID{key: f.keys[0], keys: f.keys}
	}
	return lockID{key: f.key}
}

// lockID is the lock a subcommand acts on: one key, or the keys of a
// multi-key lock (key then their first, as the daemon answers).
type lockID struct {
	key  string
	keys []string // nil for one key
}

// String names the lock in a message: "K", or keys "K1","K2".
func (id lockID) String() string {
	if id.keys == nil {
		return strconv.Quote(id.key)
	}
	q := make([]string, len(id.keys))
	for i, k := range id.keys {
		q[i] = strconv.Quote(k)
	}
	return "keys " + strings.Join(q, ",")
}

// httpsClient is an HTTP client that trusts --tls-ca (the system's CAs
// without it) and presents --tls-cert when given. Errors name the file.
func (f *lockFlags) httpsClient() (*http.Client, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.tlsCA != "" {
		pem, err := os.ReadFile(f.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca: %s: no PEM certificate in it", f.tlsCA)
		}
	}
	if f.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert %s, --tls-key %s: %w", f.tlsCert, f.tlsKey, err)
		}
		// Sent whatever CAs the daemon names as acceptable: with
		// Certificates, crypto/tls sends none when the certificate's
		// issuer is not among them, and the daemon then answers
		// "certificate required" though one was given; sent, it answers
		// "unknown certificate authority", which names the problem.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return &http.Client{Transport: tr}, nil
}

// field is one member of a printed data object, in order.
type field struct {
	name  string
	value any
}

func leaseFields(l *client.Lease, acquired bool) []field {
	now := time.Now()
	v := max(l.ValidUntil().Sub(now), 0)
	fs := []field{}
	if acquired {
		fs = append(fs, field{"token", l.Token()})
	}
	fs = append(fs, field{"ttl", int64(l.TTL() / time.Second)}, field{"expire_at", now.Add(v).Unix()})
	if l.Fence() != 0 {
		fs = append(fs, field{"fence", l.Fence()})
	}
	if acquired && l.Slot() >= 0 {
		fs = append(fs, field{"slot", int64(l.Slot())})
	}
	return append(fs, field{"validity_ms", v.Milliseconds()})
}

// printData prints the data object of an answer, as the daemon shapes it.
func printData(w io.Writer, action string, id lockID, outcome string, ok bool, more []field) error {
	b := []byte(`{"action":` + strconv.Quote(action) + `,"key":`)
	kb, _ := json.Marshal(id.key)
	b = append(b, kb...)
	if id.keys != nil {
		kb, _ = json.Marshal(id.keys)
		b = append(b, `,"keys":`...)
		b = append(b, kb...)
	}
	b = append(b, `,"`+outcome+`":`+strconv.FormatBool(ok)...)
	for _, f := range more {
		vb, _ := json.Marshal(f.value)
		b = append(b, `,"`+f.name+`":`...)
		b = append(b, vb...)
	}
	b = append(b, "}\n"...)
	_, err := w.Write(b)
	return err
}

// lockFailed maps a failed call to its exit code; a negative 200 answer
// also prints its data object.
func lockFailed(stdout io.Writer, action string, key lockID, err error) error {
	var ce *client.Error
	errors.As(err, &ce)
	switch {
	case errors.Is(err, client.ErrLockHeld):
		var more []field
		if ce != nil && ce.RetryAfter > 0 {
			more = []field{{"retry_after", int64(ce.RetryAfter / time.Second)}}
		}
		_ = printData(stdout, action, key, "acquired", false, more)
		return &exitError{code: exitBusy, err: actionFailed(err, "lock "+action, action)}
	case errors.Is(err, client.ErrNotHeld):
		outcome := map[string]string{"extend": "extended", "release": "released"}[action]
		_ = printData(stdout, action, key, outcome, false, nil)
		return &exitError{code: exitNotHeld, err: actionFailed(err, "lock "+action, action)}
	}
	return &exitError{code: exitCode(err), err: actionFailed(err, "lock "+action, action)}
}

// slotHint adds to a not-held extend or release of one key without
// --slot that a semaphore permit needs its slot: the daemon looked for
// the lock K, not for K's permits, and a permit's token is in none of
// them (`lock acquire --permits` printed the slot with the token).
func slotHint(err error, f *lockFlags) error {
	var ee *exitError
	if f.slot >= 0 || f.keys != nil || !errors.As(err, &ee) || ee.code != exitNotHeld || ee.err == nil ||
		!strings.HasSuffix(ee.err.Error(), "it expired or was already released") {
		return err
	}
	ee.err = fmt.Errorf("%w (for a semaphore's permit, give the --slot that acquire printed)", ee.err)
	return err
}

// clientPrefix starts the text of every error of package client, as Go
// packages' errors name their package. The command line names the program
// once, in main ("redlockd: …"), so what it prints leaves this out.
const clientPrefix = "redlockd: "

// cliError is an error as the command line says it, over the error it
// came from (which errors.Is and errors.As still see).
type cliError struct {
	msg string
	err error
}

func (e *cliError) Error() string { return e.msg }
func (e *cliError) Unwrap() error { return e.err }

// cliWrap is fmt.Errorf(prefix+": %w", err) but says err as cliText does.
func cliWrap(err error, prefix string) error {
	return &cliError{msg: prefix + ": " + cliText(err), err: err}
}

// actionFailed is cliWrap for a failed call of action, whose client error
// already starts with the action's name: "lock acquire: HTTP 503 …", not
// "lock acquire: acquire: HTTP 503 …".
func actionFailed(err error, prefix, action string) error {
	msg := prefix + ": " + strings.TrimPrefix(cliText(err), action+": ")
	var ce *client.Error
	if errors.As(err, &ce) && ce.Status == http.StatusNotFound {
		// The lock API answers no 404: the URL is not the daemon's API
		// (an admin listener, a wrong path), a black-box pass found.
		msg += " (no redlockd lock API at this URL: check --url or REDLOCKD_URL)"
	}
	return &cliError{msg: msg, err: err}
}

// cliText is err's text for the command line: without the clientPrefix of
// each error of package client in it (an *client.Error, the sentinel it
// matches, a sentinel wrapped or joined), and on one line (errors.Join
// puts its errors on lines of their own).
func cliText(err error) string {
	s := err.Error()
	for _, ce := range clientErrors(err, nil) {
		t := ce.Error()
		s = strings.ReplaceAll(s, t, strings.TrimPrefix(t, clientPrefix))
	}
	return strings.ReplaceAll(s, "\n", "; ")
}

// clientErrors lists the errors of package client in err's tree, each
// before the errors its text contains (an *client.Error before its Kind).
func clientErrors(err error, list []error) []error {
	if err == nil {
		return list
	}
	if ce, ok := err.(*client.Error); ok {
		list = clientErrors(ce.Kind, append(list, err))
	} else if isClientSentinel(err) {
		list = append(list, err)
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		list = clientErrors(u.Unwrap(), list)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			list = clientErrors(e, list)
		}
	}
	return list
}

func isClientSentinel(err error) bool {
	for _, s := range []error{client.ErrLockHeld, client.ErrNotHeld, client.ErrUnavailable,
		client.ErrUnauthorized, client.ErrInvalid, client.ErrLost, client.ErrReleased} {
		if err == s {
			return true
		}
	}
	return false
}

// exitCode is the exit code of an error that is not an outcome.
func exitCode(err error) int {
	var ce *client.Error
	switch {
	case errors.Is(err, client.ErrInvalid), errors.Is(err, client.ErrUnauthorized):
		return exitUsage
	case errors.As(err, &ce) && ce.Code == "too_many_auth_failures":
		// This source sent too many wrong keys: an authentication
		// problem, as the 401s before it, not a limit to retry.
		return exitUsage
	case errors.As(err, &ce) && ce.Status == http.StatusTooManyRequests:
		// A limit, not a fault: scripts retry it after Retry-After
		// rather than page someone (it was 70, "unexpected answer").
		return exitLimited
	case errors.Is(err, client.ErrUnavailable):
		return exitUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return exitUnavailable
	}
	return exitInternal
}

// forwarded are the signals lock run passes to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// lockRun runs `redlockd lock run`: see lockUsage.
func lockRun(ctx context.Context, c *client.Client, f *lockFlags, opts []client.LockOption, argv []string, stderr io.Writer) error {
	// From here on lock run handles SIGINT, SIGTERM, SIGHUP and SIGQUIT
	// itself: one that arrives while waiting for the lock ends the wait
	// (exit 128+N, nothing run); once the command runs, they are forwarded.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	l, sig, err := acquireOrSignal(ctx, c, f, opts, sigs)
	if sig != nil {
		if l != nil {
			releaseNow(l, stderr)
		}
		if unanswered(err) {
			return &exitError{code: 128 + int(sig.(syscall.Signal)), err: fmt.Errorf("lock run: %v while waiting for the lock; the command did not run (the daemon did not answer the stop: a lock it granted in that moment is released by it once it runs again, or ends with its TTL)", sig)}
		}
		return &exitError{code: 128 + int(sig.(syscall.Signal)), err: fmt.Errorf("lock run: %v while waiting for the lock; the command did not run", sig)}
	}
	if err != nil {
		if errors.Is(err, client.ErrLockHeld) {
			if f.permits > 0 {
				return &exitError{code: exitBusy, err: fmt.Errorf("lock run: every one of the %d permits of %q is held; the command did not run", f.permits, f.key)}
			}
			if f.keys != nil {
				return &exitError{code: exitBusy, err: fmt.Errorf("lock run: a key of %v is held by another owner; the command did not run", f.lockID())}
			}
			var ce *client.Error
			if errors.As(err, &ce) && strings.Contains(ce.Msg, "lock-delay") {
				return &exitError{code: exitBusy, err: fmt.Errorf("lock run: %v is in its lock-delay (its last holder's lock ended without a release); the command did not run", f.lockID())}
			}
			return &exitError{code: exitBusy, err: fmt.Errorf("lock run: %v is held by another owner; the command did not run", f.lockID())}
		}
		return &exitError{code: exitCode(err), err: actionFailed(err, "lock run: acquire", "acquire")}
	}
	release := func() { releaseNow(l, stderr) }
	if !leaseUsable(l) {
		// Granted, but lock run read the answer too late to use it (it was
		// stopped, or starved, while the daemon answered): the command
		// never ran, so this is no loss (78) but a lock not obtained in
		// time.
		release()
		return endedBeforeStart(f)
	}

	// The guardian stops the command if lock run itself is killed (guard.go).
	g, err := startGuard(stderr)
	if err != nil {
		release()
		return &exitError{code: exitCannotExec, err: fmt.Errorf("lock run: %w; the command did not run", err)}
	}
	defer func() { // after the command's group was stopped below
		if g != nil {
			g.standDown()
		}
	}()
	// The parent-death signal follows the thread that started the command:
	// keep this goroutine on it until the command is gone, so that the
	// thread ends only with lock run.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd, restoreTTY, err := startGated(argv, commandEnv(l, f), g, l.ValidUntil(), func() error {
		if !leaseUsable(l) {
			return endedBeforeStart(f)
		}
		return nil
	})
	if err != nil {
		release()
		return err
	}
	pgid := cmd.Process.Pid
	// The keep-alive must outlive a signal to lock run: the command may
	// take its time to stop, and holds the lock until it has.
	kctx, stopKeep := context.WithCancel(context.WithoutCancel(ctx))
	defer stopKeep()
	l.KeepAlive(kctx)

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// The guardian learns each new end of validity well before the last
	// one passes: extends come at about a third of the TTL, and the tick
	// is a fiftieth of it (at most 200 ms). An extend answered late, near
	// the end of validity, reached the guardian only at the next tick, up
	// to a tenth of the TTL later: on a loaded machine the guardian
	// killed a command whose lock had just been extended (a black-box
	// pass: 2–3 of 20 concurrent runs with a 1 s TTL).
	tick := time.NewTicker(max(min(f.ttl/50, 200*time.Millisecond), 5*time.Millisecond))
	defer tick.Stop()
	var (
		lost      error
		kill      <-chan time.Time
		done      = l.Done()
		werr      error
		timer     *time.Timer
		grace     time.Duration // --grace, cut to the validity left at the loss
		told      = l.ValidUntil()
		guardGone = g.exited
		// guardKilled: the guardian stopped the command at the end of the
		// validity it was told (guardianKilled).
		guardKilled bool
	)
	// commandExited takes the command's exit when it is already there:
	// select picks at random among ready cases, and after lock run was
	// stopped the loss, the kill timer and the exit can all be ready.
	// A command killed while lock run was stopped is dead but not reaped
	// yet when lock run runs again (processDead): its exit is waited for,
	// so that nothing is said of signals it never got.
	commandExited := func() bool {
		select {
		case werr = <-exited:
			return true
		default:
		}
		if !processDead(pgid) {
			return false
		}
		werr = <-exited
		return true
	}
wait:
	for {
		select {
		case werr = <-exited:
			break wait
		case <-tick.C:
			if v := l.ValidUntil(); v.After(told) && g != nil {
				if g.until(v) == nil {
					told = v
				}
			}
		case <-guardGone:
			if commandExited() {
				// The guardian killed it (lock run was stopped past
				// the validity): no second guardian for a dead group.
				guardKilled = true
				break wait
			}
			// Killed by someone: without a guardian, a kill of lock run
			// would leave the command running. Start another.
			g, guardGone = nil, nil
			ng, err := startGuard(stderr)
			if err == nil {
				if err = ng.watch(pgid, l.ValidUntil()); err != nil {
					ng.standDown()
				}
			}
			if err != nil {
				fmt.Fprintf(stderr, "redlockd lock run: its guardian exited and another could not start (%v): if lock run is killed now, the command goes on\n", err)
				break
			}
			fmt.Fprintf(stderr, "redlockd lock run: its guardian exited; another took its place\n")
			g, guardGone, told = ng, ng.exited, l.ValidUntil()
		case s := <-sigs:
			_ = syscall.Kill(-pgid, s.(syscall.Signal))
		case <-done:
			done = nil
			lost = l.Err()
			if commandExited() {
				// Killed already (by the guardian, while lock run was
				// stopped): nothing to signal; the loss is reported below.
				break wait
			}
			// The SIGKILL comes no later than the end of validity, whatever
			// --grace says: after it another owner may hold the lock. A
			// refused extend (ErrNotHeld: the token holds the lock on no
			// quorum any more, it was deleted, lost or taken) leaves no
			// validity at all, whatever the lease computed: SIGKILL follows
			// SIGTERM at once.
			left := time.Until(l.ValidUntil())
			if errors.Is(lost, client.ErrNotHeld) {
				left = 0
			}
			grace = min(f.grace, max(left-killAhead, 0)).Truncate(time.Millisecond)
			fmt.Fprintf(stderr, "redlockd lock run: lock %v lost: %s; sending SIGTERM to the command (pid %d), SIGKILL in %v\n", f.lockID(), cliText(lost), pgid, grace)
			if g != nil {
				_ = g.lost()
			}
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			timer = time.NewTimer(grace)
			kill = timer.C
		case <-kill:
			kill = nil
			if commandExited() { // it did, and both were ready at once
				break wait
			}
			fmt.Fprintf(stderr, "redlockd lock run: the command did not exit within %v of SIGTERM; sending SIGKILL\n", grace)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
	if timer != nil {
		timer.Stop()
	}
	if lost == nil {
		// The command may have ended by the guardian's kill at the end of
		// validity, seen here before the loss (lock run was stopped).
		if err := l.Err(); errors.Is(err, client.ErrLost) {
			lost = err
		} else if !time.Now().Before(l.ValidUntil()) {
			lost = fmt.Errorf("%w: validity ended without a confirmed extend", client.ErrLost)
		} else if guardKilled || guardianKilled(werr, g) {
			// The guardian's kill at the end of the validity it knew: an
			// extend confirmed after it came too late for the command,
			// which was stopped for the lock's sake, as for a loss (exit
			// 78, not 137 as if someone had killed it).
			lost = fmt.Errorf("%w: the guardian stopped the command at the end of the validity it had been told; the extend that followed came too late", client.ErrLost)
		}
	}
	// Whatever the command started and left running in its group must
	// not go on once the lock is released or lost.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	if g != nil {
		// The group is gone: the guardian has nothing left to guard. Left
		// up during the release, it killed the dead group at the end of
		// validity and blamed a stopped or hung lock run, after a command
		// that had exited 0 while the daemon was down (a black-box pass).
		g.standDown()
		g = nil
	}
	restoreTTY()
	stopKeep()
	release()
	if lost != nil {
		return &exitError{code: exitLost, err: &cliError{msg: fmt.Sprintf("lock run: the lock was lost while the command ran (%s); the command was stopped", cliText(lost)), err: lost}}
	}
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return &exitError{code: 128 + int(ws.Signal())}
		}
		return &exitError{code: ee.ExitCode()}
	}
	if werr != nil {
		return &exitError{code: exitInternal, err: fmt.Errorf("lock run: waiting for the command: %w", werr)}
	}
	return nil
}

// guardianKilled reports whether the command, whose wait ended with werr,
// was killed by g, its guardian: SIGKILL, and g exited (it exits before
// "done" only after a kill). The guardian's exit is waited for briefly: it
// exits right after its kill, but lock run may reap the command first.
func guardianKilled(werr error, g *guard) bool {
	var ee *exec.ExitError
	if g == nil || !errors.As(werr, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		return false
	}
	select {
	case <-g.exited:
		return true
	case <-time.After(500 * time.Millisecond):
		return false
	}
}

// unanswered reports whether err, of an acquire whose wait a signal
// stopped, got no answer from the daemon: a grant, if any, is not known.
func unanswered(err error) bool {
	var ce *client.Error
	return err != nil && errors.As(err, &ce) && ce.Status == 0 && errors.Is(err, client.ErrUnavailable)
}

// leaseUsable reports whether l may still be handed to a command: not
// lost, and not yet at the point where it counts as lost (LossMargin
// before its validity ends), which a lock granted after a wait reaches
// before lock run reads the answer when lock run was stopped meanwhile.
func leaseUsable(l *client.Lease) bool {
	return l.Err() == nil && time.Now().Before(l.ValidUntil().Add(-client.LossMargin(l.TTL())))
}

// endedBeforeStart is lock run's exit when the lock it obtained ended, or
// was about to, before the command was let through the start gate: the
// command did not run (exit 75, as when the lock is held: not obtained in
// time; not 78, which says a running command was stopped).
func endedBeforeStart(f *lockFlags) error {
	return &exitError{code: exitBusy, err: fmt.Errorf("lock run: the lock %v was granted, but its validity ended before the command could start (lock run stopped or starved while it was answered?); the command did not run", f.lockID())}
}

// acquireOrSignal acquires the lock unless one of sigs arrives first; then
// it returns that signal (and the lease, if the acquire won the race).
func acquireOrSignal(ctx context.Context, c *client.Client, f *lockFlags, opts []client.LockOption, sigs <-chan os.Signal) (*client.Lease, os.Signal, error) {
	// Only sigs end the wait: main's context also ends on SIGINT and
	// SIGTERM, which would race with sigs for the reason. A signal stops
	// the wait without dropping the answer (client.WithStopWaiting): a
	// lock granted in that moment comes back, and lockRun releases it,
	// instead of staying held for its TTL with nobody knowing its token.
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := make(chan struct{})
	got := make(chan os.Signal, 1)
	acquired := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			got <- s
			close(stop)
			// The daemon answers at once when the caller leaves; one that
			// does not (hung, stopped) is given up on by the client
			// within client.StopAnswerTimeout. This is the backstop, and a
			// second signal gives up at once.
			t := time.NewTimer(client.StopAnswerTimeout + time.Second)
			defer t.Stop()
			select {
			case <-t.C:
				cancel()
			case <-sigs:
				cancel()
			case <-acquired:
			}
		case <-acquired:
			close(got)
		}
	}()
	l, err := c.Acquire(actx, f.key, f.ttl, append(opts, client.WithStopWaiting(stop))...)
	close(acquired)
	if s, ok := <-got; ok {
		return l, s, err
	}
	return l, nil, err
}

// lostReleaseTimeout bounds the release of a lock already lost: it only
// cleans up what may be left of it on the masters, so lock run does not
// wait a whole request timeout for a daemon that no longer answers (a
// stopped daemon, the usual cause of the loss) before it exits.
const lostReleaseTimeout = 2 * time.Second

// releaseNow releases l on a context of its own; a failure is reported
// unless the lock was already lost (then the release only cleans up, and
// is given lostReleaseTimeout). A lock still held is given the request
// timeout, but no longer than its validity: once that has ended there is
// nothing left to release, and a release tried again while no daemon
// listens (Client.Release) ran on for the whole 10 s.
func releaseNow(l *client.Lease, stderr io.Writer) {
	lost := l.Err() // before Release sets ErrReleased
	timeout := min(client.DefaultRequestTimeout, time.Until(l.ValidUntil()))
	byValidity := timeout < client.DefaultRequestTimeout
	if lost != nil || timeout <= 0 {
		lost, timeout = cmp.Or(lost, client.ErrLost), lostReleaseTimeout
	}
	rctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := l.Release(rctx)
	deadline, _ := rctx.Deadline()
	switch {
	case err == nil || lost != nil:
	case byValidity && time.Until(deadline) < time.Second/4:
		// Given up at the end of validity (Client.Release stops retrying
		// a redial ahead of its deadline).
		fmt.Fprintf(stderr, "redlockd lock run: release: %s; the lock's validity has ended, so nothing is left to release\n", strings.TrimPrefix(cliText(err), "release: "))
	default:
		fmt.Fprintf(stderr, "redlockd lock run: release: %s (the lock ends with its TTL)\n", strings.TrimPrefix(cliText(err), "release: "))
	}
}

// killAhead is how long before the end of validity lock run's own
// SIGKILL of a lost lock's command comes: the guardian kills the group at
// the end of validity too, as the backup for a lock run that cannot, and
// the backup should come after the kill it backs up, not race it.
const killAhead = 50 * time.Millisecond

// startErrCode is lock run's exit code for a command that could not
// start: 127 when it was not found, 126 otherwise (as a shell does).
func startErrCode(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return exitNotFound
	}
	return exitCannotExec
}

// commandEnv is the environment of lock run's command: lock run's own,
// and the lock's REDLOCK_* variables.
func commandEnv(l *client.Lease, f *lockFlags) []string {
	env := append(os.Environ(),
		"REDLOCK_KEY="+l.Key(),
		"REDLOCK_NAMESPACE="+f.namespace,
		"REDLOCK_FENCE="+strconv.FormatInt(l.Fence(), 10),
		"REDLOCK_VALID_UNTIL="+strconv.FormatInt(l.ValidUntil().Unix(), 10),
	)
	if l.Slot() >= 0 {
		env = append(env, "REDLOCK_SLOT="+strconv.Itoa(l.Slot()))
	}
	if f.keys != nil {
		env = append(env, "REDLOCK_KEYS="+strings.Join(f.keys, ","))
	}
	return env
}

// startGated starts argv with env in a process group of its own behind
// the start gate (gate.go), tells the guardian g the group and the end of
// validity, and only then opens the gate. Call it with the goroutine
// locked to its thread (the parent-death signal follows the thread). On
// success the command runs and restoreTTY gives the terminal back once it
// has exited; on failure (usable, asked just before the gate opens, says
// the lock can no longer be used, or another) the command did not run,
// nothing of it is left, and err is an *exitError.
func startGated(argv, env []string, g *guard, validUntil time.Time, usable func() error) (cmd *exec.Cmd, restoreTTY func(), err error) {
	gateR, gateW, err := os.Pipe()
	if err != nil {
		return nil, nil, &exitError{code: exitCannotExec, err: fmt.Errorf("lock run: start gate: %w; the command did not run", err)}
	}
	defer gateW.Close() // closed without "go" on every failure: nothing runs
	defer gateR.Close() // the command has its own copy once started
	cmd, err = gatedCommand(argv, gateR)
	if err != nil {
		return nil, nil, &exitError{code: startErrCode(err), err: fmt.Errorf("lock run: %w", err)}
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = env
	cmd.SysProcAttr, restoreTTY = childProcAttr()
	setParentDeathSignal(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		restoreTTY()
		return nil, nil, &exitError{code: startErrCode(err), err: fmt.Errorf("lock run: %w", err)}
	}
	stop := func(why string, err error) error {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		restoreTTY()
		return &exitError{code: exitCannotExec, err: fmt.Errorf("lock run: %s: %w; the command did not run", why, err)}
	}
	if err := g.watch(cmd.Process.Pid, validUntil); err != nil {
		return nil, nil, stop("the guardian is gone", err)
	}
	if err := usable(); err != nil {
		// The lock ended while the command was being set up: the gate
		// stays shut, and the command never runs.
		_ = stop("", err)
		return nil, nil, err
	}
	if err := openGate(gateW); err != nil {
		return nil, nil, stop("opening the start gate", err)
	}
	return cmd, restoreTTY, nil
}
