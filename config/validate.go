package config

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redlockd/redlockd/redlock"
)

// FieldError is one problem found by Validate. Field is the path in the
// YAML file's terms ("masters[2]", "api_keys[0].key"); Problem says what is
// wrong without repeating any secret.
type FieldError struct {
	Field   string
	Problem string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

// Limits Validate enforces.
const (
	minMasters          = 3
	maxNameLen          = 64
	minKeyLen           = 16
	maxKeyPrefixLen     = 64
	maxTTLLimit         = int64(redlock.DefaultMaxTTL / time.Second) // 86400
	minMaxBodyBytes     = 1024
	maxMaxBodyBytes     = 1 << 20
	minPerMasterTimeout = time.Millisecond
	maxPerMasterTimeout = 5 * time.Second
	maxMaxWait          = 10 * time.Minute
	minHealthInterval   = 50 * time.Millisecond
	maxHealthInterval   = time.Minute
	maxDriftFactor      = redlock.MaxDriftFactor
	maxDrainDelay       = 5 * time.Minute
)

var (
	logFormats = []string{"json", "console"}
	logLevels  = []string{"debug", "info", "warn", "error"}
)

// Validate checks every field and returns all problems joined with
// errors.Join, each a *FieldError, or nil. It does not change c.
func (c *Config) Validate() error {
	var v validator

	if c.Listen == "" {
		v.add("listen", "required")
	} else if p := addrProblem(c.Listen, true); p != "" {
		v.add("listen", "%s", p)
	}

	c.validateTLS(&v)
	c.validateAdmin(&v)
	c.validateMasters(&v)
	c.validatePreviousGroups(&v)
	c.validateMasterAuth(&v)
	c.validateAPIKeys(&v)

	switch {
	case c.KeyPrefix == "":
		v.add("key_prefix", "required")
	case len(c.KeyPrefix) > maxKeyPrefixLen:
		v.add("key_prefix", "%d bytes, the limit is %d", len(c.KeyPrefix), maxKeyPrefixLen)
	case !utf8.ValidString(c.KeyPrefix):
		v.add("key_prefix", "not valid UTF-8")
	case strings.IndexFunc(c.KeyPrefix, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		v.add("key_prefix", "%q: must not contain spaces or control characters", c.KeyPrefix)
	}

	v.duration("per_master_timeout", c.PerMasterTimeout, minPerMasterTimeout, maxPerMasterTimeout)

	if !(c.DriftFactor >= 0 && c.DriftFactor <= maxDriftFactor) {
		v.add("drift_factor", "%g is out of range, need 0 ≤ x ≤ %g", c.DriftFactor, maxDriftFactor)
	}

	maxTTLOK := v.integer("max_ttl", int64(c.MaxTTL), 1, maxTTLLimit)
	if v.integer("default_ttl", int64(c.DefaultTTL), 1, maxTTLLimit) && maxTTLOK &&
		c.DefaultTTL > c.MaxTTL && c.DefaultTTL != defaultDefaultTTL {
		// The built-in 30 follows a smaller max_ttl down (EffectiveDefaultTTL);
		// a default_ttl someone chose is not silently lowered.
		v.add("default_ttl", "%d is above max_ttl (%d)", c.DefaultTTL, c.MaxTTL)
	}

	v.duration("max_wait", c.MaxWait, 0, maxMaxWait)
	v.integer("max_waiters", int64(c.MaxWaiters), 1, 1_000_000)
	v.integer("max_waiters_per_account", int64(c.MaxWaitersPerAccount), 1, 1_000_000)
	v.integer("auth_failures_per_minute", int64(c.AuthFailuresPerMinute), 1, 1_000_000)
	v.integer("auth_failure_burst", int64(c.AuthFailureBurst), 1, 1_000_000)
	v.integer("auth_failure_sources", int64(c.AuthFailureSources), 1, 1_000_000)
	v.integer("max_body_bytes", c.MaxBodyBytes, minMaxBodyBytes, maxMaxBodyBytes)
	v.duration("idempotency_max_retention", c.IdempotencyMaxRetention, time.Minute, 7*24*time.Hour)
	v.integer("idempotency_max_answer_bytes", int64(c.IdempotencyMaxAnswerBytes), 1024, 1<<20)
	v.duration("health_interval", c.HealthInterval, minHealthInterval, maxHealthInterval)
	if n := c.smallestGroup(); n >= minMasters && n%2 == 1 {
		if most := n - (n/2 + 1); c.ExtraVotes < 0 || c.ExtraVotes > most {
			which := ""
			if len(c.MasterGroups) > 0 {
				which = " in the smallest group"
			}
			v.add("extra_votes", "%d is out of range, need 0 to %d with %d masters%s (quorum %d + extra votes ≤ masters)", c.ExtraVotes, most, n, which, n/2+1)
		}
	} else if c.ExtraVotes < 0 {
		v.add("extra_votes", "%d is out of range, need ≥ 0", c.ExtraVotes)
	}
	v.duration("drain_delay", c.DrainDelay, 0, maxDrainDelay)
	if c.ShutdownTimeout <= 0 {
		v.add("shutdown_timeout", "%v must be more than 0", c.ShutdownTimeout)
	}
	v.limits("account_defaults", c.AccountDefaults, c.MaxTTL, c.EffectiveDefaultTTL())
	if c.AccountDefaults.Burst != nil && c.AccountLimits(APIKey{}).Rate == 0 {
		v.add("account_defaults.burst", "set, but account_defaults.rate is not: a burst needs a rate")
	}
	v.duration("limits_sync_interval", c.LimitsSyncInterval, minLimitsSyncInterval, maxLimitsSyncInterval)
	v.oneOf("log_format", c.LogFormat, logFormats)
	v.oneOf("log_level", c.LogLevel, logLevels)

	return errors.Join(v.errs...)
}

func (c *Config) validateTLS(v *validator) {
	switch {
	case c.TLSCertFile != "" && c.TLSKeyFile == "":
		v.add("tls_key_file", "required with tls_cert_file")
	case c.TLSCertFile == "" && c.TLSKeyFile != "":
		v.add("tls_cert_file", "required with tls_key_file")
	}
	if c.TLSClientCAFile != "" && c.TLSCertFile == "" {
		v.add("tls_client_ca_file", "needs tls_cert_file and tls_key_file: client certificates are checked only over TLS")
	}
}

func (c *Config) validateAdmin(v *validator) {
	if c.AdminListen != "" {
		if p := addrProblem(c.AdminListen, true); p != "" {
			v.add("admin_listen", "%s", p)
		} else if c.AdminListen == c.Listen {
			v.add("admin_listen", "%q is also listen: the operator listener needs an address of its own", c.AdminListen)
		}
	}
	if c.AdminToken != "" {
		// A token read from admin_token_file is reported under that field.
		field := "admin_token"
		if c.AdminTokenFile != "" {
			field = "admin_token_file (" + c.AdminTokenFile + ")"
		}
		if c.AdminListen == "" {
			v.add(field, "needs admin_listen: the token guards the admin listener only")
		} else {
			v.plainKey(field, c.AdminToken)
		}
	}
}

func (c *Config) validateMasters(v *validator) {
	if len(c.MasterGroups) > 0 {
		c.validateMasterGroups(v)
		return
	}
	if n := len(c.Masters); n < minMasters || n%2 == 0 {
		v.add("masters", "%d given, need an odd number ≥ %d", n, minMasters)
	}
	seen := make(map[string]int, len(c.Masters))
	for i, m := range c.Masters {
		field := fmt.Sprintf("masters[%d]", i)
		id, ok := v.masterAddr(field, m)
		if !ok {
			continue
		}
		if j, dup := seen[id]; dup {
			v.add(field, "%q duplicates masters[%d]", m, j)
			continue
		}
		seen[id] = i
	}
}

// MasterSettings are the YAML names of the settings that say how to reach
// and authenticate to the masters: what a command that only talks to the
// masters (repair-fences) validates, beside its own.
var MasterSettings = []string{
	"masters", "master_groups", "previous_master_groups", "master_username", "master_password", "master_password_file",
	"master_tls", "master_tls_ca_file", "master_tls_server_name", "master_tls_cert_file", "master_tls_key_file",
}

func (c *Config) validateMasterAuth(v *validator) {
	if u := c.MasterUsername; u != "" {
		switch {
		case len(u) > maxNameLen*2:
			v.add("master_username", "%d bytes, the limit is %d", len(u), maxNameLen*2)
		case strings.IndexFunc(u, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0:
			v.add("master_username", "only printable ASCII without spaces is allowed (Redis ACL user names)")
		case c.MasterPassword == "":
			v.add("master_username", "needs master_password or master_password_file")
		}
	}
	if !c.MasterTLS {
		for _, f := range []struct{ name, value string }{
			{"master_tls_ca_file", c.MasterTLSCAFile}, {"master_tls_server_name", c.MasterTLSServerName},
			{"master_tls_cert_file", c.MasterTLSCertFile}, {"master_tls_key_file", c.MasterTLSKeyFile},
		} {
			if f.value != "" {
				v.add(f.name, "needs master_tls: true")
			}
		}
		return
	}
	switch {
	case c.MasterTLSCertFile != "" && c.MasterTLSKeyFile == "":
		v.add("master_tls_key_file", "required with master_tls_cert_file")
	case c.MasterTLSCertFile == "" && c.MasterTLSKeyFile != "":
		v.add("master_tls_cert_file", "required with master_tls_key_file")
	}
}

func (c *Config) validateAPIKeys(v *validator) {
	if len(c.APIKeys) == 0 {
		v.add("api_keys", "none given, need at least one")
	}
	names := make(map[string]int, len(c.APIKeys))
	hashes := make(map[[32]byte]int, len(c.APIKeys))
	for i, k := range c.APIKeys {
		field := fmt.Sprintf("api_keys[%d]", i)

		// Names are never echoed: a key pasted into the name field would
		// otherwise end up in the message.
		switch {
		case k.Name == "":
			v.add(field+".name", "required")
		case strings.IndexFunc(k.Name, func(r rune) bool { return !isNameRune(r) }) >= 0:
			// First: only then is a byte a character, for the length.
			v.add(field+".name", "only A-Z a-z 0-9 _ . - are allowed")
		case len(k.Name) > maxNameLen:
			v.add(field+".name", "%d characters, the limit is %d", len(k.Name), maxNameLen)
		default:
			if j, dup := names[k.Name]; dup {
				v.add(field+".name", "same name as api_keys[%d]", j)
			} else {
				names[k.Name] = i
			}
		}

		v.limits(field, k.Limits, c.MaxTTL, c.EffectiveDefaultTTL())
		if k.Burst != nil && c.AccountLimits(k).Rate == 0 {
			v.add(field+".burst", "set, but no rate applies to this account (rate here or in account_defaults): a burst needs a rate")
		}

		keyOK := false
		switch {
		case k.Key != "" && k.KeySHA256 != "":
			v.add(field, "set key or key_sha256, not both")
		case k.Key == "" && k.KeySHA256 == "":
			v.add(field, "set one of key or key_sha256")
		case k.Key != "":
			keyOK = v.plainKey(field+".key", k.Key)
		default:
			keyOK = v.keySHA256(field+".key_sha256", k.KeySHA256)
		}
		if !keyOK {
			continue
		}
		h := k.Hash()
		if j, dup := hashes[h]; dup {
			v.add(field, "same key as api_keys[%d]", j)
			continue
		}
		hashes[h] = i
	}
}

// validator collects problems.
type validator struct{ errs []error }

// ValidateFields is Validate restricted to the named YAML fields and their
// parts ("masters" covers "masters[2]", "api_keys" covers
// "api_keys[0].key"): the others are neither checked nor required. With no
// names it is Validate.
func (c *Config) ValidateFields(names ...string) error {
	err := c.Validate()
	if err == nil || len(names) == 0 {
		return err
	}
	var keep []error
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *FieldError
		if errors.As(e, &fe) && slices.Contains(names, fieldBase(fe.Field)) {
			keep = append(keep, e)
		}
	}
	return errors.Join(keep...)
}

// fieldBase is the top-level YAML field of a FieldError's Field.
func fieldBase(field string) string {
	if i := strings.IndexAny(field, "[."); i >= 0 {
		return field[:i]
	}
	return field
}

func (v *validator) add(field, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)})
}

func (v *validator) integer(field string, n, lo, hi int64) bool {
	switch {
	case n < lo:
		v.add(field, "%d is below the minimum of %d", n, lo)
	case n > hi:
		v.add(field, "%d is above the limit of %d", n, hi)
	default:
		return true
	}
	return false
}

func (v *validator) duration(field string, d Duration, lo, hi time.Duration) {
	switch {
	case time.Duration(d) < lo:
		v.add(field, "%v is below the minimum of %v", d, lo)
	case time.Duration(d) > hi:
		v.add(field, "%v is above the limit of %v", d, hi)
	}
}

func (v *validator) oneOf(field, s string, allowed []string) {
	for _, a := range allowed {
		if s == a {
			return
		}
	}
	v.add(field, "%q is not one of: %s", s, strings.Join(allowed, ", "))
}

// plainKey checks a plaintext API key without ever quoting it.
func (v *validator) plainKey(field, key string) bool {
	switch {
	case len(key) < minKeyLen:
		v.add(field, "too short (%d bytes, need ≥ %d)", len(key), minKeyLen)
	case strings.IndexFunc(key, func(r rune) bool { return r < ' ' || r > '~' }) >= 0:
		v.add(field, "only printable ASCII is allowed (the key travels in an HTTP header)")
	case key[0] == ' ' || key[len(key)-1] == ' ':
		v.add(field, "starts or ends with a space, which HTTP drops from header values")
	default:
		return true
	}
	return false
}

func (v *validator) keySHA256(field, sum string) bool {
	if len(sum) != 64 || strings.IndexFunc(sum, func(r rune) bool { return !isHexRune(r) }) >= 0 {
		v.add(field, "want 64 hex characters")
		return false
	}
	if strings.ToLower(sum) != sum {
		v.add(field, "want lowercase hex")
		return false
	}
	return true
}

// addrProblem says what is wrong with a host:port, or returns "". A
// listen address may leave the host empty (every interface) and use port 0
// (any free port); a master address may not.
func addrProblem(addr string, listen bool) string {
	if strings.Contains(addr, "://") || strings.Contains(addr, "@") {
		// Not quoted: a URL may carry a password.
		return "want host:port, not a URL"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			msg := strings.TrimSuffix(ae.Err, " in address")
			if msg == "too many colons" {
				msg += ` (write an IPv6 address as "[::1]:6379")`
			}
			return fmt.Sprintf("%q: %s", addr, msg)
		}
		return fmt.Sprintf("%q: %v", addr, err)
	}
	if host == "" && !listen {
		return fmt.Sprintf("%q: missing host", addr)
	}
	lo := 1
	if listen {
		lo = 0
	}
	if n, err := strconv.Atoi(port); err != nil || n < lo || n > 65535 {
		return fmt.Sprintf("%q: port must be a number from %d to 65535", addr, lo)
	}
	return ""
}

// canonicalAddr turns a valid host:port into a form in which spellings of
// the same address compare equal ("LOCALHOST:06379", "::1" vs
// "0:0:0:0:0:0:0:1").
func canonicalAddr(addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String()
	} else {
		host = strings.ToLower(host)
	}
	n, _ := strconv.Atoi(port)
	return net.JoinHostPort(host, strconv.Itoa(n))
}

func isNameRune(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' ||
		r == '_' || r == '.' || r == '-'
}

func isHexRune(r rune) bool {
	return '0' <= r && r <= '9' || 'a' <= r && r <= 'f' || 'A' <= r && r <= 'F'
}

// masterAddr checks one master's address (field names it): not empty, a
// host:port. It returns the address in the form duplicates are compared
// in, and false after adding the problem to v.
func (v *validator) masterAddr(field, m string) (string, bool) {
	if m == "" {
		v.add(field, "empty")
		return "", false
	}
	if p := addrProblem(m, false); p != "" {
		v.add(field, "%s", p)
		return "", false
	}
	return canonicalAddr(m), true
}
