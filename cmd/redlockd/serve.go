package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	"go.uber.org/zap/zapcore"

	"github.com/redlockd/redlockd/config"
	"github.com/redlockd/redlockd/daemon"
	"github.com/redlockd/redlockd/daemon/limits"
	"github.com/redlockd/redlockd/redlock"
	"github.com/redlockd/redlockd/redlock/idempotency"
)

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "YAML config file (optional when REDLOCKD_* or flags give masters and api keys)")
	var cfg config.Config
	cfg.RegisterFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: redlockd serve --config FILE [flags]\n\nServes the HTTP lock API over the configured masters until SIGINT/SIGTERM.\nFlags override REDLOCKD_* environment variables, which override the file.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	cfg, err := config.Load(*path, os.LookupEnv, fs)
	if err != nil {
		return err
	}
	log, err := newLogger(cfg)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing useful to do at exit
	warnPlaceholderKeys(log, cfg.APIKeys)
	for _, v := range config.UnknownEnv(os.Environ()) {
		name, _, _ := strings.Cut(v, " ")
		log.Warn("no setting reads environment variable "+v, zap.String("variable", name))
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	load := func() (config.Config, error) { return config.Load(*path, os.LookupEnv, fs) }
	return runDaemon(ctx, cfg, log, ln, load)
}

// runDaemon wires a redlock.Client and a daemon.Server from cfg and serves
// on ln until ctx ends, then shuts down gracefully. With load (which
// reads the configuration again), SIGHUP and POST /admin/reload reload it
// (see reloader); without, SIGHUP is left alone.
func runDaemon(ctx context.Context, cfg config.Config, log *zap.Logger, ln net.Listener, load func() (config.Config, error)) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := daemon.NewMetrics(reg)
	metrics.SetMasters(allMasters(cfg))

	redis.SetLogger(zapRedisLogger{log.Named("go-redis")})
	// Every group's masters at once (one client certificate to reload),
	// then cut group by group.
	all := cfg
	all.Masters = allMasters(cfg)
	masters, masterCert, err := masterOptions(all)
	if err != nil {
		ln.Close()
		return err
	}
	warnings, err := checkMasterAccess(ctx, masters, masterNames(cfg), cfg.KeyPrefix)
	if err != nil {
		ln.Close()
		return err
	}
	for _, w := range warnings {
		log.Warn("an optional command is refused", zap.String("why", w))
	}
	// The accounts' limits live on the current groups' masters, on
	// connections of their own: the counts on the first group's, each
	// held lock on its own group's (limits.NewGroupStore).
	var limitMasters [][]*redis.Options
	rest := masters
	for _, g := range cfg.Groups() {
		limitMasters = append(limitMasters, rest[:len(g.Masters)])
		rest = rest[len(g.Masters):]
	}
	var groups []redlock.Group
	clients := map[string]*redlock.Client{}
	for _, g := range distinctGroups(cfg) {
		locker, err := newGroupClient(ctx, cfg, log, metrics, masters[:len(g.Masters)])
		masters = masters[len(g.Masters):]
		if err != nil {
			ln.Close()
			return fmt.Errorf("master group %s: %w", g.Name, err)
		}
		defer locker.Close()
		clients[g.Name] = locker
		groups = append(groups, redlock.Group{Name: g.Name, Client: locker})
	}
	if err := serversOnce(groups); err != nil {
		ln.Close()
		return err
	}
	daemonLocker := daemon.NewRedlockLocker(groups[0].Client)
	switch {
	case len(cfg.PreviousMasterGroups) > 0:
		daemonLocker, err = movingLocker(ctx, cfg, clients, groups)
	case len(cfg.MasterGroups) > 0:
		daemonLocker, err = daemon.NewGroupsLocker(groups)
		if err == nil && len(groups) > 1 {
			err = syncGroupFences(ctx, cfg, groups)
		}
	}
	if err != nil {
		ln.Close()
		return err
	}
	// The registrations go on through the drain (ctx ends at SIGTERM, when
	// the drain starts, and the daemon serves on for drain_delay): they stop
	// when serve returns, after the last request, before the Clients close
	// (a black-box pass with a 25 s drain saw step 2 end while the draining
	// daemons still granted).
	regCtx, stopRegistry := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRegistry()
	daemonLocker = registerPlacement(regCtx, cfg, groups, daemonLocker)
	// Idempotency records live on the first group too (one Client), behind
	// its checks: placement spreads the lock keys, not the records.
	return serveWith(ctx, cfg, log, ln, load, reg, metrics, masterCert, daemonLocker, limitMasters, clients[cfg.Groups()[0].Name])
}

// serversOnce refuses a Redis server that is a master of two groups under
// two addresses (localhost and 127.0.0.1, a DNS alias), found by its
// run_id as each group's Client found it (CheckMasters checks within a
// group): the groups must be independent, and config can only compare the
// addresses as written. Masters that did not answer are not compared.
func serversOnce(groups []redlock.Group) error {
	type seat struct {
		group string
		index int
		addr  string
	}
	seen := map[string]seat{}
	var errs []error
	for _, g := range groups {
		for _, st := range g.Client.Masters() {
			if st.RunID == "" {
				continue
			}
			if o, dup := seen[st.RunID]; dup && o.group != g.Name {
				errs = append(errs, fmt.Errorf("%w: master %d (%s) of group %s and master %d (%s) of group %s have run_id %s: a master belongs to one group",
					redlock.ErrSameServer, o.index, o.addr, o.group, st.Index, st.Addr, g.Name, st.RunID[:8]))
				continue
			}
			seen[st.RunID] = seat{g.Name, st.Index, st.Addr}
		}
	}
	return errors.Join(errs...)
}

// distinctGroups is every group the daemon locks in: the current groups,
// then the previous ones that are not current (while the groups change).
func distinctGroups(cfg config.Config) []config.MasterGroup {
	out := append([]config.MasterGroup(nil), cfg.Groups()...)
	for _, p := range cfg.PreviousMasterGroups {
		if !slices.ContainsFunc(out, func(g config.MasterGroup) bool { return g.Name == p.Name }) {
			out = append(out, p)
		}
	}
	return out
}

// masterNames names each master of allMasters as the config does: "group
// g1's masters[0]" with master_groups, "masters[0]" for a masters list (a
// black-box pass read "masters[7]", which no master_groups config has).
func masterNames(cfg config.Config) []string {
	var out []string
	for _, g := range distinctGroups(cfg) {
		for i := range g.Masters {
			if len(cfg.MasterGroups) == 0 && len(cfg.PreviousMasterGroups) == 0 {
				out = append(out, fmt.Sprintf("masters[%d]", i))
			} else {
				out = append(out, fmt.Sprintf("group %s's masters[%d]", g.Name, i))
			}
		}
	}
	return out
}

// allMasters is every master of every group, group after group.
func allMasters(cfg config.Config) []string {
	var out []string
	for _, g := range distinctGroups(cfg) {
		out = append(out, g.Masters...)
	}
	return out
}

// syncGroupFences syncs the groups' fence floors every health interval
// until ctx ends (redlock.Groups.SyncFences): a stable daemon that comes
// after daemons on fewer groups without the moving phase gives moved keys
// fences above their old group's once its layout gate lets it grant (a
// black-box pass restarted daemons straight onto three groups from two:
// the gate held them off, then moved keys' fences fell from 306 to 1).
func syncGroupFences(ctx context.Context, cfg config.Config, groups []redlock.Group) error {
	g, err := redlock.NewGroups(groups...)
	if err != nil {
		return err
	}
	go everyInterval(ctx, cfg, g.SyncFences)
	return nil
}

// everyInterval runs f now and every health interval until ctx ends.
func everyInterval(ctx context.Context, cfg config.Config, f func()) {
	t := time.NewTicker(max(time.Duration(cfg.HealthInterval), 10*time.Millisecond))
	defer t.Stop()
	for {
		f()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// movingLocker is the Locker of the moving phase: keys whose group changes
// between previous_master_groups and the current groups are locked in
// both (redlock.Moving); a group in both lists is one Client. Until ctx
// ends it syncs the groups' fencing counters every health interval
// (Moving.SyncFences), so that a key that moves without being locked in
// the moving phase continues above its old group's fences.
func movingLocker(ctx context.Context, cfg config.Config, clients map[string]*redlock.Client, groups []redlock.Group) (daemon.MasterLocker, error) {
	list := func(gs []config.MasterGroup) (*redlock.Groups, []string, error) {
		var rg []redlock.Group
		var names []string
		for _, g := range gs {
			rg = append(rg, redlock.Group{Name: g.Name, Client: clients[g.Name]})
			names = append(names, g.Name)
		}
		r, err := redlock.NewGroups(rg...)
		return r, names, err
	}
	from, fromNames, err := list(cfg.PreviousMasterGroups)
	if err != nil {
		return nil, err
	}
	to, toNames, err := list(cfg.Groups())
	if err != nil {
		return nil, err
	}
	moving := redlock.NewMoving(from, to)
	go everyInterval(ctx, cfg, moving.SyncFences)
	return daemon.NewMovingLocker(moving, groups, fromNames, toNames)
}

// registerPlacement registers this daemon's layout of master groups in the
// placement registry on the first group's masters every health interval
// until ctx ends (daemon/placements.go), and returns l under the layout
// gate (daemon.PlacementGate): it grants and extends only while no daemon
// on a layout that may not lock beside its own may hold a lock — for a
// stable daemon, any other groups; for a moving one, groups that are
// neither its previous nor its current ones. A moving daemon also reads
// there until when daemons on its previous groups may still be locking,
// for /readyz and `redlockd groups-change`. groups are the daemon's groups,
// the first first (a moving daemon's previous ones after its current ones).
func registerPlacement(ctx context.Context, cfg config.Config, groups []redlock.Group, l daemon.MasterLocker) daemon.MasterLocker {
	first := groups[0].Client
	names := func(gs []config.MasterGroup) []string {
		var out []string
		for _, g := range gs {
			out = append(out, g.Name)
		}
		return out
	}
	var from []string
	if len(cfg.PreviousMasterGroups) > 0 {
		from = names(cfg.PreviousMasterGroups)
	}
	layout := daemon.PlacementLayout(from, names(cfg.Groups()))
	interval := time.Duration(cfg.HealthInterval)
	// watch: a moving daemon's previous groups, whose daemons' end is step
	// 2's (old_until_ms); a stable daemon reports until when the layouts it
	// may not lock beside were registered (others_until_ms).
	watch := ""
	if from != nil {
		watch = daemon.PlacementLayout(nil, from)
	}
	var seen func(daemon.PlacementReading)
	if registry, ok := l.(interface{ RegistrySeen(int64, int64, bool) }); ok {
		seen = func(r daemon.PlacementReading) {
			if from != nil {
				registry.RegistrySeen(r.WatchUntilMS, r.Sent.UnixMilli(), r.OK)
			} else {
				registry.RegistrySeen(r.UntilMS, r.Sent.UnixMilli(), r.OK)
			}
		}
	}
	// The gate keeps this daemon from locking at the same time as daemons
	// it shares no groups with: for a stable daemon, daemons on other
	// groups (step 3 before step 2's end, a daemon left on old groups); for
	// a moving one, daemons of a later change (a moving daemon that
	// outlived its change: a black-box pass resumed one after a second
	// change and it granted keys the later daemons held).
	maxTTL := time.Duration(cfg.MaxTTL) * time.Second
	firstGroup := ""
	if len(cfg.MasterGroups) > 0 {
		firstGroup = cfg.MasterGroups[0].Name
	}
	gate := daemon.NewPlacementGate(interval, firstGroup, maxTTL, func() time.Duration { return max(maxTTL, first.LongestMaxTTL()) })
	// Before its first grant after such a layout locked, every group's
	// fences go above that layout's (daemon.JumpFences): a moving daemon's
	// previous groups too.
	key := daemon.PlacementKey(cfg.KeyPrefix)
	gate.SetFenceJump(func(ctx context.Context) error {
		return daemon.JumpFences(ctx, groups, key, daemon.FenceJump)
	})
	go daemon.RunPlacementRegistry(ctx, first, key, layout, watch, interval, gate, seen)
	return gate.Gate(l)
}

// newGroupClient is the redlock.Client over one master group, checked
// (CheckMasters) before it serves.
func newGroupClient(ctx context.Context, cfg config.Config, log *zap.Logger, metrics *daemon.Metrics, masters []*redis.Options) (*redlock.Client, error) {
	locker, err := redlock.New(masters,
		redlock.WithPerMasterTimeout(time.Duration(cfg.PerMasterTimeout)),
		redlock.WithDriftFactor(cfg.DriftFactor),
		redlock.WithHealthInterval(time.Duration(cfg.HealthInterval)),
		redlock.WithExtraVotes(cfg.ExtraVotes),
		redlock.WithObserver(metrics),
		// The library logs through log/slog; its records go to the same
		// zap core as the daemon's own, under the name "redlock".
		redlock.WithLogger(slog.New(zapslog.NewHandler(log.Core(), zapslog.WithName("redlock"), zapslog.WithCaller(true)))),
		redlock.WithMaxTTL(time.Duration(cfg.MaxTTL)*time.Second),
		// Bookkeeping keys share the prefix but never the "lock:" word of
		// lock keys (daemon/keys.go), so they cannot collide with a lock.
		redlock.WithFenceKey(cfg.KeyPrefix+"fence"),
		// Every replica reads the delay records, so that an acquire's
		// lock_delay_ms holds whichever replica serves the next acquire.
		redlock.WithMaxLockDelay(redlock.MaxLockDelay),
		redlock.WithMarkerKey(cfg.KeyPrefix+"marker"),
	)
	if err != nil {
		return nil, err
	}
	// Five addresses that are really fewer servers is not Redlock: refuse
	// to start. Masters that do not answer yet are not an error.
	if err := locker.CheckMasters(ctx); err != nil {
		locker.Close()
		return nil, err
	}
	return locker, nil
}

// serveWith serves the daemon over locker until ctx ends; limitMasters
// are the masters the accounts' limits live on, idemClient the Client the
// idempotency records live behind.
func serveWith(ctx context.Context, cfg config.Config, log *zap.Logger, ln net.Listener, load func() (config.Config, error),
	reg *prometheus.Registry, metrics *daemon.Metrics, masterCert *masterClientCert, locker daemon.MasterLocker, limitMasters [][]*redis.Options, idemClient *redlock.Client) error {
	var err error

	var srvTLS *daemon.ServerTLS
	if cfg.TLSCertFile != "" {
		srvTLS, err = daemon.NewServerTLS(daemon.TLSFiles{CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, ClientCAFile: cfg.TLSClientCAFile})
		if err != nil {
			ln.Close()
			fields := "tls_cert_file, tls_key_file"
			if cfg.TLSClientCAFile != "" {
				fields += ", tls_client_ca_file"
			}
			return fmt.Errorf("%s: %w", fields, err)
		}
		subject, notAfter := srvTLS.Certificate()
		log.Info("serving HTTPS", zap.String("certificate", subject), zap.Time("not_after", notAfter), zap.Bool("client_certificates_required", cfg.TLSClientCAFile != ""))
	}
	registerTLSMetrics(reg, srvTLS, masterCert)
	var rl *reloader
	var reload func(context.Context) (daemon.ReloadResult, error)
	if load != nil {
		rl = &reloader{log: log.Named("reload"), load: load, cur: cfg, tls: srvTLS, masterCert: masterCert, count: newReloadCounter(reg)}
		reload = rl.reload
	}
	// The accounts' limits live on the same masters, on connections of
	// their own; a master is given twice the per-master timeout per sync.
	limitStore, err := limits.NewGroupStore(limitMasters, max(2*time.Duration(cfg.PerMasterTimeout), 50*time.Millisecond))
	if err != nil {
		ln.Close()
		return err
	}
	defer limitStore.Close()
	// Idempotency records live on idemClient's masters, behind its checks
	// (redlock/idempotency).
	idemStore, err := idempotency.New(idemClient,
		idempotency.WithMaxRetention(time.Duration(cfg.IdempotencyMaxRetention)),
		idempotency.WithMaxAnswerBytes(cfg.IdempotencyMaxAnswerBytes))
	if err != nil {
		ln.Close()
		return err
	}
	srv, err := daemon.New(log.Named("http"), &daemon.Options{
		APIKeys:               daemonKeys(cfg),
		KeyPrefix:             cfg.KeyPrefix,
		DefaultTTL:            time.Duration(cfg.EffectiveDefaultTTL()) * time.Second,
		MaxTTL:                time.Duration(cfg.MaxTTL) * time.Second,
		MaxWait:               time.Duration(cfg.MaxWait),
		MaxBodyBytes:          cfg.MaxBodyBytes,
		MaxWaiters:            cfg.MaxWaiters,
		MaxWaitersPerAccount:  cfg.MaxWaitersPerAccount,
		AuthFailuresPerMinute: cfg.AuthFailuresPerMinute,
		AuthFailureBurst:      cfg.AuthFailureBurst,
		AuthFailureSources:    cfg.AuthFailureSources,
		ShutdownTimeout:       time.Duration(cfg.ShutdownTimeout),
		DrainDelay:            time.Duration(cfg.DrainDelay),
		Locker:                locker,
		Health:                locker,
		Metrics:               metrics,
		Gatherer:              reg,
		AdminListen:           cfg.AdminListen,
		AdminToken:            cfg.AdminToken,
		Reload:                reload,
		TLS:                   srvTLS,
		LimitStore:            limitStore,
		LimitsSyncInterval:    time.Duration(cfg.LimitsSyncInterval),
		Idempotency:           &daemon.IdempotencyOptions{Store: idemStore, Registerer: reg},
		// Logged once every check passed and every listener is open (the
		// admin one is opened by Serve), not at the listen: a daemon that
		// then exits never said "serving".
		OnListening: func() {
			log.Info("redlockd serving", zap.String("addr", ln.Addr().String()), zap.Strings("masters", allMasters(cfg)), zap.Int("master_groups", len(cfg.Groups())), zap.Bool("changing_groups", len(cfg.PreviousMasterGroups) > 0))
		},
	})
	if err != nil {
		ln.Close()
		return err
	}
	if rl != nil {
		rl.srv = srv
		defer rl.watchSIGHUP()()
	}
	return srv.Serve(ctx, ln)
}

// placeholderMark is in the example config's API key: a key that still
// holds it was never replaced, and anyone who has read the example knows it.
const placeholderMark = "CHANGE-ME"

// warnPlaceholderKeys logs a warning for each account whose API key is
// still the example config's placeholder. It names the account, never the key.
func warnPlaceholderKeys(log *zap.Logger, keys []config.APIKey) {
	for _, k := range keys {
		if strings.Contains(strings.ToUpper(k.Key), placeholderMark) {
			log.Warn("API KEY NOT CHANGED: account "+strconv.Quote(k.Name)+" uses the example config's placeholder key, which is public; replace it (e.g. openssl rand -hex 32) before anything real depends on this daemon",
				zap.String("account", k.Name))
		}
	}
}

func newLogger(cfg config.Config) (*zap.Logger, error) {
	zc, err := loggerConfig(cfg)
	if err != nil {
		return nil, err
	}
	return buildLogger(zc)
}

// loggerConfig is the zap configuration of log_format and log_level.
func loggerConfig(cfg config.Config) (zap.Config, error) {
	var zc zap.Config
	if cfg.LogFormat == "console" {
		zc = zap.NewDevelopmentConfig()
	} else {
		zc = zap.NewProductionConfig()
		zc.EncoderConfig.TimeKey = "time"
		zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	}
	lvl, err := zapcore.ParseLevel(cfg.LogLevel)
	if err != nil {
		return zap.Config{}, fmt.Errorf("log_level: %w", err)
	}
	zc.Level = zap.NewAtomicLevelAt(lvl)
	return zc, nil
}

// buildLogger builds zc with stack traces for DPanic and above only. zap's
// presets add them from error (production) or warn (development), but an
// error here is operational — a refused reload, a master that refuses the
// credentials — and its message says all there is to say; a stack trace
// only buries it. A bug (DPanic, a recovered panic) still gets one.
func buildLogger(zc zap.Config) (*zap.Logger, error) {
	return zc.Build(zap.AddStacktrace(zapcore.DPanicLevel))
}

// zapRedisLogger sends go-redis's internal messages (dial failures to a
// down master, pool events) to zap at debug: the health loop already logs
// master state changes once, at warn.
type zapRedisLogger struct{ log *zap.Logger }

func (l zapRedisLogger) Printf(_ context.Context, format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...))
}
