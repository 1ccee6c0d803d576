package main

import (
	"context"
	"crypto/tls"
	"fmt"
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
	"github.com/redlockd/redlockd/daemon/limits"
)

// reloader applies a configuration read again (on SIGHUP or POST
// /admin/reload) to a running daemon: the listeners' TLS certificate files
// and the masters' client certificate are read again (new connections use
// them), and the API keys and the admin token replaced, at once; the
// settings that cannot change without a restart are named in the log. One
// reload runs at a time.
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
// account_defaults) go with the keys; admin_token_file is read again, and
// a new path is as good as a new token (see adminTokenChange).
var reloadable = []string{"api_keys", "account_defaults", "admin_token", "admin_token_file"}

// adminTokenChange says whether next replaces the admin token in force
// (cur's), and refuses a reload that would remove it: the admin listener
// would then serve anyone who reaches it, which only a restart may decide.
// Without an admin listener the token guards nothing yet (config
// validation refuses one without admin_listen; a new admin_listen waits
// for a restart), so a change is named with the settings that need a
// restart instead.
func adminTokenChange(cur, next config.Config) (apply, needsRestart bool, err error) {
	if next.AdminToken == cur.AdminToken {
		return false, false, nil
	}
	if cur.AdminListen == "" {
		return false, true, nil
	}
	if next.AdminToken == "" {
		field := "admin_token"
		if cur.AdminTokenFile != "" {
			field = "admin_token_file"
		}
		return false, false, &config.FieldError{Field: field, Problem: "removed, but a reload does not remove the admin token: the admin listener (admin_listen) would then serve anyone who reaches it; set a new token to rotate it, or restart without one"}
	}
	return true, false, nil
}

// reload reads the configuration again and applies it. A configuration that
// does not load or validate is refused (a *daemon.ReloadError) and the old
// one stays in force. The log line names the accounts added, removed and
// re-keyed, never a key, and says whether the admin token changed, never
// what it is.
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
	// The settings a reload puts in force are judged beside the ones it
	// leaves (max_ttl, …: those need a restart), not beside the file's new
	// values of those: an account lock_delay checked against a larger
	// max_ttl in the file would be applied under the smaller one in force,
	// and refuse every acquire of that account that keeps the default.
	inForce := r.cur
	inForce.APIKeys, inForce.AccountDefaults = next.APIKeys, next.AccountDefaults
	if err := inForce.ValidateFields(reloadable...); err != nil {
		if changed := changedSettings(r.cur, next); len(changed) > 0 {
			err = fmt.Errorf("%w (judged with the settings in force: a change of %s takes effect only at a restart)", err, strings.Join(changed, ", "))
		}
		r.log.Error("reload refused: the accounts do not fit the settings in force; the old ones stay in force", zap.Error(err))
		return daemon.ReloadResult{}, &daemon.ReloadError{Err: err}
	}
	// What can be refused without changing anything first: the admin
	// token, then the certificates, then the keys (SetAPIKeys checks before
	// it swaps). The admin token is set after them, so a refused reload
	// leaves the old one in force.
	setAdminToken, tokenNeedsRestart, err := adminTokenChange(r.cur, next)
	if err != nil {
		r.log.Error("reload refused: the admin token; the old one and the old keys stay in force", zap.Error(err))
		return daemon.ReloadResult{}, &daemon.ReloadError{Err: err}
	}
	var masterCert *tls.Certificate
	if r.masterCert != nil {
		if masterCert, err = r.masterCert.read(); err != nil {
			r.log.Error("reload refused: the masters' client certificate; the old one, the old keys and the admin token stay in force", zap.Error(err))
			return daemon.ReloadResult{}, &daemon.ReloadError{Err: err}
		}
	}
	if r.tls != nil {
		if err := r.tls.Reload(); err != nil {
			r.log.Error("reload refused: the TLS certificate; the old one, the old keys and the admin token stay in force", zap.Error(err))
			return daemon.ReloadResult{}, &daemon.ReloadError{Err: err}
		}
	}
	res, err := r.srv.SetAPIKeys(daemonKeys(next))
	if err != nil {
		r.log.Error("reload refused: the API keys; the old ones and the admin token stay in force", zap.Error(err))
		return daemon.ReloadResult{}, &daemon.ReloadError{Err: err}
	}
	if setAdminToken {
		// Cannot fail: adminTokenChange refused a removal, and the daemon
		// has an admin listener.
		if err := r.srv.SetAdminToken(next.AdminToken); err != nil {
			r.log.Error("reload: the admin token was not replaced; the old one stays in force", zap.Error(err))
			return daemon.ReloadResult{}, err
		}
	}
	if masterCert != nil {
		r.masterCert.cur.Store(masterCert)
	}
	res.Certificates = r.tls != nil || masterCert != nil
	res.AdminTokenChanged = setAdminToken
	res.Ignored = changedSettings(r.cur, next)
	if tokenNeedsRestart {
		res.Ignored = append(res.Ignored, "admin_token")
	}
	r.cur.APIKeys, r.cur.AccountDefaults = next.APIKeys, next.AccountDefaults
	if r.cur.AdminListen != "" {
		r.cur.AdminToken, r.cur.AdminTokenFile = next.AdminToken, next.AdminTokenFile
	}
	warnPlaceholderKeys(r.log, next.APIKeys)
	fields := []zap.Field{
		zap.Int("accounts", res.Accounts),
		zap.Strings("added", res.Added),
		zap.Strings("removed", res.Removed),
		zap.Strings("keys_changed", res.KeysChanged),
		// Whether, never what: the token is not logged, nor any of it.
		zap.Bool("admin_token_changed", res.AdminTokenChanged),
	}
	if r.tls != nil {
		subject, notAfter := r.tls.Certificate()
		fields = append(fields, zap.String("certificate", subject), zap.Time("certificate_not_after", notAfter))
	}
	if _, set := os.LookupEnv("REDLOCKD_API_KEYS"); set {
		r.log.Warn("REDLOCKD_API_KEYS is set: it replaces the file's api_keys, so a reload reads the same keys again; rotate keys in the file and unset the variable")
	}
	if _, set := os.LookupEnv("REDLOCKD_ADMIN_TOKEN"); set {
		r.log.Warn("REDLOCKD_ADMIN_TOKEN is set: it replaces the file's admin_token, so a reload reads the same token again; rotate it in admin_token_file (or the file) and unset the variable")
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
		out[i] = daemon.APIKey{Account: k.Name, Hash: k.Hash(), Limits: limits.Limits{
			QuotaCalls: l.QuotaCalls, QuotaWindow: l.QuotaPer, Rate: l.Rate, Burst: l.Burst, MaxLocks: l.MaxLocks,
		}, LockDelay: l.LockDelay, MaxIdempotencyBytes: l.MaxIdempotencyBytes}
	}
	return out
}
