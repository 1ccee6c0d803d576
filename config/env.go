package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ApplyEnv overrides c with the REDLOCKD_* variables that lookup (normally
// os.LookupEnv) reports as set; a variable set to "" counts as set. The
// variables are REDLOCKD_ + the upper-cased YAML field name:
//
//	REDLOCKD_LISTEN, REDLOCKD_TLS_CERT_FILE, REDLOCKD_TLS_KEY_FILE,
//	REDLOCKD_TLS_CLIENT_CA_FILE, REDLOCKD_ADMIN_LISTEN, REDLOCKD_ADMIN_TOKEN,
//	REDLOCKD_ADMIN_TOKEN_FILE, REDLOCKD_MASTERS (comma-separated),
//	REDLOCKD_MASTER_USERNAME, REDLOCKD_MASTER_PASSWORD,
//	REDLOCKD_MASTER_PASSWORD_FILE, REDLOCKD_MASTER_TLS (true or false),
//	REDLOCKD_MASTER_TLS_CA_FILE, REDLOCKD_MASTER_TLS_SERVER_NAME,
//	REDLOCKD_MASTER_TLS_CERT_FILE, REDLOCKD_MASTER_TLS_KEY_FILE, REDLOCKD_API_KEYS ("name:key,name2:key2"),
//	REDLOCKD_KEY_PREFIX, REDLOCKD_PER_MASTER_TIMEOUT, REDLOCKD_DRIFT_FACTOR,
//	REDLOCKD_DEFAULT_TTL, REDLOCKD_MAX_TTL, REDLOCKD_MAX_WAIT,
//	REDLOCKD_MAX_BODY_BYTES, REDLOCKD_HEALTH_INTERVAL,
//	REDLOCKD_DRAIN_DELAY, REDLOCKD_SHUTDOWN_TIMEOUT,
//	REDLOCKD_ACCOUNT_DEFAULTS_QUOTA ("100000/24h" or "unlimited"),
//	REDLOCKD_ACCOUNT_DEFAULTS_RATE, REDLOCKD_ACCOUNT_DEFAULTS_BURST,
//	REDLOCKD_ACCOUNT_DEFAULTS_MAX_LOCKS, REDLOCKD_ACCOUNT_DEFAULTS_MAX_IDEMPOTENCY_BYTES,
//	REDLOCKD_ACCOUNT_DEFAULTS_LOCK_DELAY,
//	REDLOCKD_LIMITS_SYNC_INTERVAL, REDLOCKD_LOG_FORMAT, REDLOCKD_LOG_LEVEL
//
// An account's own limits (quota, rate, burst, max_locks,
// max_idempotency_bytes, lock_delay on
// its api_keys entry) are set in the file only.
//
// REDLOCKD_MASTERS and REDLOCKD_API_KEYS replace the file's lists rather
// than adding to them. Every bad value is reported, joined, each naming its
// variable; the values of REDLOCKD_API_KEYS, REDLOCKD_MASTER_PASSWORD and
// REDLOCKD_ADMIN_TOKEN are never repeated. ApplyEnv does not validate; see Validate.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	var errs []error
	applied := map[string]bool{}
	for i := range settings {
		s := &settings[i]
		val, ok := lookup(s.envName())
		if !ok {
			continue
		}
		applied[s.name] = true
		if val == "" && protects[s.name] {
			// Set but empty would turn the protection off (the admin
			// listener open to anyone, HTTPS served as plain HTTP),
			// silently: refused, as a YAML setting with no value is (a
			// black-box pass: REDLOCKD_ADMIN_TOKEN_FILE= served /admin/*
			// with no credential).
			errs = append(errs, fmt.Errorf("%s: set but empty, which would turn %s off; unset the variable to keep the configured value", s.envName(), s.name))
			continue
		}
		if err := s.set(c, val); err != nil {
			if s.secret {
				errs = append(errs, fmt.Errorf("%s: %w", s.envName(), err))
			} else {
				errs = append(errs, fmt.Errorf("%s: %q: %w", s.envName(), val, err))
			}
		}
	}
	c.overrideSecretPairs(applied)
	return errors.Join(errs...)
}

// protects are the settings that turn on a protection (TLS, the admin
// token, the masters' credentials): an empty REDLOCKD_*
// variable for one is refused rather than read as "none".
var protects = map[string]bool{
	"tls_cert_file": true, "tls_key_file": true, "tls_client_ca_file": true,
	"admin_token": true, "admin_token_file": true,
	"master_password": true, "master_password_file": true,
	"master_tls_ca_file": true, "master_tls_cert_file": true, "master_tls_key_file": true,
	// Not api_keys: empty, it leaves no key, which serve refuses by
	// itself, and commands that need none (repair-fences) take it.
}

// overrideSecretPairs makes a layer (the environment, the flags) that set
// one of a secret and its file (master_password, master_password_file)
// override the other from the layer below: REDLOCKD_MASTER_PASSWORD over a
// file's master_password_file is an override, as for every other setting,
// not "set both" (a black-box pass found it refused). Both set by one
// layer stays an error (ReadSecretFiles).
func (c *Config) overrideSecretPairs(applied map[string]bool) {
	for _, sf := range secretFiles {
		switch {
		case applied[sf.name] && !applied[sf.fileName]:
			*sf.file(c) = ""
		case applied[sf.fileName] && !applied[sf.name]:
			*sf.value(c) = ""
		}
	}
}

// clientVariables are the REDLOCKD_* variables that redlockd's client
// commands (lock, lock run, status) and the compose file read: set in the
// same shell as `serve`, they are not mistakes.
var clientVariables = []string{
	"REDLOCKD_URL", "REDLOCKD_API_KEY", "REDLOCKD_TLS_CA", "REDLOCKD_TLS_CERT", "REDLOCKD_TLS_KEY",
	"REDLOCKD_IMAGE",
}

// UnknownEnv returns one line for each REDLOCKD_* variable in environ
// (os.Environ's "NAME=value" form, values never repeated) that no setting
// and no client command reads, in environ's order: a misspelt variable
// (REDLOCKD_MAXTTL) otherwise leaves its setting at the default without a
// word. A close setting's variable is named: "REDLOCKD_MAXTTL (did you
// mean REDLOCKD_MAX_TTL?)".
func UnknownEnv(environ []string) []string {
	known := make([]string, 0, len(settings)+len(clientVariables))
	for i := range settings {
		known = append(known, settings[i].envName())
	}
	known = append(known, clientVariables...)
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "REDLOCKD_") || slices.Contains(known, name) {
			continue
		}
		line := name
		if near := nearest(strings.ToLower(name), lowerAll(known)); near != "" {
			line += " (did you mean " + strings.ToUpper(near) + "?)"
		}
		unknown = append(unknown, line)
	}
	return unknown
}

func lowerAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strings.ToLower(n)
	}
	return out
}
