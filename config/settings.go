package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// setting is one field that environment variables, and most of them flags
// too, can set. Its environment variable is REDLOCKD_ + the upper-cased
// YAML name; its flag is the YAML name with dashes.
type setting struct {
	name    string // YAML field name
	flag    bool   // also a flag; secrets are not, as argv is visible to every local user
	secret  bool   // the value never appears in an error
	boolean bool   // a flag that may be given without a value (--master-tls)
	usage   string // flag help; a `quoted` word names the value's type
	set     func(c *Config, s string) error
	get     func(c *Config) string // the flag help's default
}

// A setting of a nested field is named by its YAML path with dots
// ("account_defaults.rate"); its variable and flag spell the dot like an
// underscore (REDLOCKD_ACCOUNT_DEFAULTS_RATE, --account-defaults-rate).
func (s *setting) envName() string {
	return "REDLOCKD_" + strings.ToUpper(strings.ReplaceAll(s.name, ".", "_"))
}
func (s *setting) flagName() string { return strings.NewReplacer("_", "-", ".", "-").Replace(s.name) }

// settings is in Config's field order.
var settings = []setting{
	stringSetting("listen", "`host:port` the HTTP API listens on", func(c *Config) *string { return &c.Listen }),
	stringSetting("tls_cert_file", "PEM certificate `file` the listeners serve HTTPS with (with tls-key-file)", func(c *Config) *string { return &c.TLSCertFile }),
	stringSetting("tls_key_file", "PEM private key `file` of tls-cert-file", func(c *Config) *string { return &c.TLSKeyFile }),
	stringSetting("tls_client_ca_file", "PEM `file` of the CAs client certificates must chain to (mutual TLS)", func(c *Config) *string { return &c.TLSClientCAFile }),
	stringSetting("admin_listen", "`host:port` of the operator listener (dashboard, /metrics, /v1/stats, /v1/history, /admin/reload, /admin/locks); empty keeps them on listen", func(c *Config) *string { return &c.AdminListen }),
	{
		name:   "admin_token",
		secret: true,
		set:    func(c *Config, s string) error { c.AdminToken = s; return nil },
	},
	stringSetting("admin_token_file", "`file` holding the admin listener's bearer token", func(c *Config) *string { return &c.AdminTokenFile }),
	{
		name:  "masters",
		flag:  true,
		usage: "comma-separated `list` of the Redis masters as host:port; an odd number, at least 3 (no default)",
		set: func(c *Config, s string) error {
			l, err := splitList(s)
			if err != nil {
				return err
			}
			c.Masters = l
			return nil
		},
		get: func(c *Config) string { return strings.Join(c.Masters, ",") },
	},
	stringSetting("master_username", "Redis ACL `user` to authenticate as on every master (needs master_password)", func(c *Config) *string { return &c.MasterUsername }),
	{
		name:   "master_password",
		secret: true,
		set:    func(c *Config, s string) error { c.MasterPassword = s; return nil },
	},
	stringSetting("master_password_file", "`file` holding the masters' password", func(c *Config) *string { return &c.MasterPasswordFile }),
	{
		name:    "master_tls",
		flag:    true,
		boolean: true,
		usage:   "connect to the masters with TLS",
		set: func(c *Config, s string) error {
			b, err := strconv.ParseBool(strings.TrimSpace(s))
			if err != nil {
				return errors.New("want true or false")
			}
			c.MasterTLS = b
			return nil
		},
		get: func(c *Config) string { return strconv.FormatBool(c.MasterTLS) },
	},
	stringSetting("master_tls_ca_file", "PEM `file` of the CAs the masters' certificates chain to (default: the system's CAs)", func(c *Config) *string { return &c.MasterTLSCAFile }),
	stringSetting("master_tls_server_name", "`name` every master's certificate must carry (default: each master's host)", func(c *Config) *string { return &c.MasterTLSServerName }),
	stringSetting("master_tls_cert_file", "PEM client certificate `file` for the masters (with master-tls-key-file)", func(c *Config) *string { return &c.MasterTLSCertFile }),
	stringSetting("master_tls_key_file", "PEM `file` of master-tls-cert-file's key", func(c *Config) *string { return &c.MasterTLSKeyFile }),
	{
		name:   "api_keys",
		secret: true,
		set: func(c *Config, s string) error {
			keys, err := parseAPIKeys(s)
			if err != nil {
				return err
			}
			c.APIKeys = keys
			return nil
		},
	},
	stringSetting("key_prefix", "`prefix` of every Redis key the daemon writes", func(c *Config) *string { return &c.KeyPrefix }),
	durationSetting("per_master_timeout", "bound on each call to one master, a `duration` from 1ms to 5s", func(c *Config) *Duration { return &c.PerMasterTimeout }),
	parsedSetting("drift_factor", "share of the TTL allowed for clock drift, 0 ≤ `factor` ≤ 0.1",
		floatParser("want a number such as 0.01"),
		func(c *Config, f float64) { c.DriftFactor = f },
		func(c *Config) string { return formatFloat(c.DriftFactor) }),
	intSetting("default_ttl", "lock TTL in `seconds` when a request gives none, 1 to 86400 (lowered to max-ttl if that is smaller)", func(c *Config) *int { return &c.DefaultTTL }),
	intSetting("max_ttl", "longest lock TTL in `seconds` a request may ask for, 1 to 86400", func(c *Config) *int { return &c.MaxTTL }),
	durationSetting("max_wait", "cap on a request's wait_ms, a `duration` from 0 to 10m", func(c *Config) *Duration { return &c.MaxWait }),
	intSetting("max_waiters", "most acquires with wait_ms waiting in this daemon, a `number` from 1 to 1000000", func(c *Config) *int { return &c.MaxWaiters }),
	intSetting("max_waiters_per_account", "most acquires with wait_ms waiting for one account, a `number` from 1 to 1000000", func(c *Config) *int { return &c.MaxWaitersPerAccount }),
	intSetting("auth_failures_per_minute", "failed authentications allowed per source (IPv4 address, IPv6 /64) per minute once its burst is spent, a `number` from 1 to 1000000", func(c *Config) *int { return &c.AuthFailuresPerMinute }),
	intSetting("auth_failure_burst", "failed authentications a source may make at once before it gets 429, a `number` from 1 to 1000000", func(c *Config) *int { return &c.AuthFailureBurst }),
	intSetting("auth_failure_sources", "most sources whose failed authentications are remembered, a `number` from 1 to 1000000", func(c *Config) *int { return &c.AuthFailureSources }),
	parsedSetting("max_body_bytes", "largest request body in `bytes`, 1024 to 1048576", parseInt64,
		func(c *Config, n int64) { c.MaxBodyBytes = n },
		func(c *Config) string { return strconv.FormatInt(c.MaxBodyBytes, 10) }),
	durationSetting("idempotency_max_retention", "longest retention of an idempotency record, and how long a master repaired after a data loss stays out of record answers, a `duration` from 1m to 168h", func(c *Config) *Duration { return &c.IdempotencyMaxRetention }),
	intSetting("idempotency_max_answer_bytes", "largest answer an idempotency record stores (body and headers), a `number` of bytes from 1024 to 1048576", func(c *Config) *int { return &c.IdempotencyMaxAnswerBytes }),
	durationSetting("health_interval", "how often every master is probed, a `duration` from 50ms to 1m", func(c *Config) *Duration { return &c.HealthInterval }),
	intSetting("extra_votes", "votes beyond the quorum an acquire and an extend need, a `number` from 0 to masters − quorum", func(c *Config) *int { return &c.ExtraVotes }),
	durationSetting("drain_delay", "how long after SIGTERM the daemon keeps serving with /readyz 503 and every answer closing its connection, a `duration` from 0 to 5m", func(c *Config) *Duration { return &c.DrainDelay }),
	durationSetting("shutdown_timeout", "how long in-flight requests may run after the drain delay, a `duration` above 0", func(c *Config) *Duration { return &c.ShutdownTimeout }),
	{
		name:  "account_defaults.quota",
		flag:  true,
		usage: "every account's call quota unless its api_keys entry sets one: `calls/window` such as 100000/24h, or unlimited",
		set: func(c *Config, s string) error {
			q, err := parseQuota(s)
			if err != nil {
				return err
			}
			c.AccountDefaults.Quota = &q
			return nil
		},
		get: func(c *Config) string {
			if c.AccountDefaults.Quota == nil {
				return unlimited
			}
			return c.AccountDefaults.Quota.String()
		},
	},
	parsedSetting("account_defaults.rate", "every account's rate limit unless its api_keys entry sets one, in `calls` per second (token bucket); 0 for none",
		floatParser("want a number of calls per second such as 200"),
		func(c *Config, f float64) { c.AccountDefaults.Rate = &f },
		func(c *Config) string {
			if c.AccountDefaults.Rate == nil {
				return "0"
			}
			return formatFloat(*c.AccountDefaults.Rate)
		}),
	optionalIntSetting("account_defaults.burst", "every account's token bucket size (calls at once) unless its api_keys entry sets one, a `number` from 1; default the rate rounded up",
		func(c *Config) **int { return &c.AccountDefaults.Burst }),
	optionalIntSetting("account_defaults.max_locks", "most locks one account holds at once across all daemons unless its api_keys entry sets it, a `number`; 0 for no cap",
		func(c *Config) **int { return &c.AccountDefaults.MaxLocks }),
	optionalIntSetting("account_defaults.max_idempotency_bytes", "most bytes one account's idempotency records take on each master across all daemons unless its api_keys entry sets it, a `number`; 0 for no cap",
		func(c *Config) **int { return &c.AccountDefaults.MaxIdempotencyBytes }),
	parsedSetting("account_defaults.lock_delay", "every account's lock-delay for acquires that send no lock_delay_ms, unless its api_keys entry sets one, a `duration` from 0 to 60s; 0 for none",
		parseDuration,
		func(c *Config, d Duration) { c.AccountDefaults.LockDelay = &d },
		func(c *Config) string {
			if c.AccountDefaults.LockDelay == nil {
				return "0s"
			}
			return c.AccountDefaults.LockDelay.String()
		}),
	durationSetting("limits_sync_interval", "how often quotas, rates and lock counts are synced with the masters, a `duration` from 10ms to 10s", func(c *Config) *Duration { return &c.LimitsSyncInterval }),
	stringSetting("log_format", "log `format`: json or console", func(c *Config) *string { return &c.LogFormat }),
	stringSetting("log_level", "log `level`: debug, info, warn or error", func(c *Config) *string { return &c.LogLevel }),
}

func stringSetting(name, usage string, field func(*Config) *string) setting {
	return setting{
		name:  name,
		flag:  true,
		usage: usage,
		set:   func(c *Config, s string) error { *field(c) = s; return nil },
		get:   func(c *Config) string { return *field(c) },
	}
}

// parsedSetting is a flag setting whose value parse reads from the text and
// store puts into the Config; get gives the flag help's default. Every
// number and duration setting goes through it. parse's error is the whole
// message after the setting's name, so it must not quote the text.
func parsedSetting[T any](name, usage string, parse func(string) (T, error), store func(*Config, T), get func(*Config) string) setting {
	return setting{
		name:  name,
		flag:  true,
		usage: usage,
		set: func(c *Config, s string) error {
			v, err := parse(s)
			if err != nil {
				return err
			}
			store(c, v)
			return nil
		},
		get: get,
	}
}

func intSetting(name, usage string, field func(*Config) *int) setting {
	return parsedSetting(name, usage, parseInt,
		func(c *Config, n int) { *field(c) = n },
		func(c *Config) string { return strconv.Itoa(*field(c)) })
}

// optionalIntSetting sets a field that is nil until given; its flag help
// shows no default while it is nil.
func optionalIntSetting(name, usage string, field func(*Config) **int) setting {
	return parsedSetting(name, usage, parseInt,
		func(c *Config, n int) { *field(c) = &n },
		func(c *Config) string {
			if p := *field(c); p != nil {
				return strconv.Itoa(*p)
			}
			return ""
		})
}

func durationSetting(name, usage string, field func(*Config) *Duration) setting {
	return parsedSetting(name, usage+` (with a unit: "50ms", "1s")`, parseDuration,
		func(c *Config, d Duration) { *field(c) = d },
		func(c *Config) string { return field(c).String() })
}

func parseInt(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, errors.New("want a whole number")
	}
	return n, nil
}

func parseInt64(s string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, errors.New("want a whole number")
	}
	return n, nil
}

// floatParser parses a float64 and, on a malformed one, says want.
func floatParser(want string) func(string) (float64, error) {
	return func(s string) (float64, error) {
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return 0, errors.New(want)
		}
		return f, nil
	}
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// splitList splits a comma-separated list, trimming spaces around entries.
// An empty string is an empty list; an empty entry is an error.
func splitList(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
		if parts[i] == "" {
			return nil, fmt.Errorf("entry %d is empty", i+1)
		}
	}
	return parts, nil
}

// parseAPIKeys reads "name:key,name2:key2". Errors name the entry by its
// position and never quote it.
func parseAPIKeys(s string) ([]APIKey, error) {
	entries, err := splitList(s)
	if err != nil {
		return nil, err
	}
	keys := make([]APIKey, 0, len(entries))
	for i, e := range entries {
		name, key, ok := strings.Cut(e, ":")
		if !ok || name == "" || key == "" {
			return nil, fmt.Errorf("entry %d: want name:key", i+1)
		}
		keys = append(keys, APIKey{Name: name, Key: key})
	}
	return keys, nil
}
