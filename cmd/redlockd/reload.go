package main

import (
	"context"
	"crypto/tls"
	"os"
	"os/signal"
	"reflect"
	"strings"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/redlockd/redlockd/config"
	"github.com/redlockd/redlockd/daemon"
)

// reloader applies a configuration read again (on SIGHUP or POST
// /admin/reload) to a running daemon: the listeners' TLS certificate files
// and the masters' client certificate are read again (new connections use
// them) and the API keys replaced, at once; the settings that
// cannot change without a restart are named in the log. One reload runs at
// a time.
type reloader struct {
	log  *zap.Logger
	load func() (config.Config, error) // the serve command's file, env and flags
	srv  *daemon.Server
	tls  *daemon.ServerTLS // nil without TLS
	// masterCert is the client certificate for the masters; nil without.
	masterCert *masterClientCert
	count      *prometheus.CounterVec // by result: ok, refused

	mu  sync.Mutex
	cur config.Config
}

// reloadable are the settings a reload applies; every other change waits
// for a restart. The accounts' limits (on api_keys entries and in
// account_defaults) go with the keys.
var reloadable = []string{"api_keys", "account_defaults"}

// reload reads the configuration again and applies it. A configuration that
// does not load or validate is refused (a *daemon.ReloadError) and the old
// one stays in force. The log line names the accounts added, removed and
// re-keyed, never a key.
func (r *reloader) reload(ctx context.Context) (daemon.ReloadResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	res, err := r.apply(ctx)
	result := "ok"
	if err != nil {
		result = "refused"
	}
	r.count.WithLabelValues(result).Inc()
	return res, err
}

func (r *reloader) apply(_ context.Context) (daemon.ReloadResult, error) {
	next, err := r.load()
	if err != nil {
		r.log.Error("reload refused: the configuration does not load; the old one stays in force", zap.Error(err))
		return daemon.ReloadResult{}, &daemon.ReloadError{Err: err}
	}
	// The certificates first: when they cannot be read, nothing changes.
	var masterCert *tls.Certificate
	if r.masterCert != nil {
		if masterCert, err = r.masterCert.read(); err != nil {
			r.log.Error("reload refused: the masters' client certificate; the old one and the old keys stay in force", zap.Error(err))
			return daemon.ReloadResult{}, &daemon.ReloadError{Err: err}
		}
	}
	if r.tls != nil {
		if err := r.tls.Reload(); err != nil {
			r.log.Error("reload refused: the TLS certificate; the old one and the old keys stay in force", zap.Error(err))
			return daemon.ReloadResult{}, &daemon.ReloadError{Err: err}
		}
	}
	res, err := r.srv.SetAPIKeys(daemonKeys(next))
	if err != nil {
		r.log.Error("reload refused: the API keys; the old ones stay in force", zap.Error(err))
		return daemon.ReloadResult{}, &daemon.ReloadError{Err: err}
	}
	if masterCert != nil {
		r.masterCert.cur.Store(masterCert)
	}
	res.Certificates = r.tls != nil || masterCert != nil
	res.Ignored = changedSettings(r.cur, next)
	r.cur.APIKeys, r.cur.AccountDefaults = next.APIKeys, next.AccountDefaults
	warnPlaceholderKeys(r.log, next.APIKeys)
	fields := []zap.Field{
		zap.Int("accounts", res.Accounts),
		zap.Strings("added", res.Added),
		zap.Strings("removed", res.Removed),
		zap.Strings("keys_changed", res.KeysChanged),
	}
	if r.tls != nil {
		subject, notAfter := r.tls.Certificate()
		fields = append(fields, zap.String("certificate", subject), zap.Time("certificate_not_after", notAfter))
	}
	if _, set := os.LookupEnv("REDLOCKD_API_KEYS"); set {
		r.log.Warn("REDLOCKD_API_KEYS is set: it replaces the file's api_keys, so a reload reads the same keys again; rotate keys in the file and unset the variable")
	}
	if len(res.Ignored) > 0 {
		fields = append(fields, zap.Strings("changed_need_restart", res.Ignored))
		r.log.Warn("reloaded; some changed settings take effect only at a restart", fields...)
	} else {
		r.log.Info("reloaded", fields...)
	}
	return res, nil
}

// watchSIGHUP reloads on every SIGHUP until the returned stop is called.
// SIGHUP no longer ends the process once it returns.
func (r *reloader) watchSIGHUP() (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.onSIGHUP(ctx, hup)
	}()
	return func() {
		signal.Stop(hup)
		cancel()
		<-done
	}
}

func (r *reloader) onSIGHUP(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.log.Info("SIGHUP: reloading the configuration")
			_, _ = r.reload(ctx) // logged by reload
		}
	}
}

// changedSettings names, by YAML name, the settings that differ between a
// and b, other than the reloadable ones.
func changedSettings(a, b config.Config) []string {
	out := []string{}
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	t := va.Type()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		skip := false
		for _, r := range reloadable {
			skip = skip || r == name
		}
		if !skip && !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			out = append(out, name)
		}
	}
	return out
}

// daemonKeys are the daemon's accounts for the configured API keys, each
// with its limits (its own, else account_defaults).
func daemonKeys(cfg config.Config) []daemon.APIKey {
	out := make([]daemon.APIKey, len(cfg.APIKeys))
	for i, k := range cfg.APIKeys {
		l := cfg.AccountLimits(k)
		out[i] = daemon.APIKey{Account: k.Name, Hash: k.Hash(), Limits: daemon.AccountLimits{
			QuotaCalls: l.QuotaCalls, QuotaWindow: l.QuotaPer, Rate: l.Rate, Burst: l.Burst, MaxLocks: l.MaxLocks,
		}}
	}
	return out
}
