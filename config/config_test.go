package config_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/config"
)

// Secret values used across the tests; no error message may contain them.
const (
	secretKey      = "s3cret-key-AAAAAAAAAAAA"
	secretKey2     = "s3cret-key-BBBBBBBBBBBB"
	secretPassword = "s3cret-password"
)

var secretKeySHA = sha256Hex(secretKey)

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// validConfig passes Validate; cases change one thing at a time.
func validConfig() config.Config {
	c := config.DefaultConfig()
	c.Masters = []string{"127.0.0.1:6379", "127.0.0.1:6380", "127.0.0.1:6381"}
	c.MasterPassword = secretPassword
	c.APIKeys = []config.APIKey{{Name: "shop", Key: secretKey}}
	return c
}

// errorLines splits a joined error into its messages.
func errorLines(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}

// assertNoSecrets fails if err's text contains any of the secrets.
func assertNoSecrets(t *testing.T, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range append(secrets, secretKey, secretKey2, secretKeySHA, secretPassword) {
		if s != "" && strings.Contains(err.Error(), s) {
			t.Errorf("error reveals a secret %q:\n%v", s, err)
		}
	}
}

func TestValidate(t *testing.T) {
	ms := func(d time.Duration) config.Duration { return config.Duration(d) }
	tests := []struct {
		name   string
		change func(c *config.Config)
		want   []string // every message, in order; nil means valid
	}{
		{"valid", func(c *config.Config) {}, nil},
		{"five masters", func(c *config.Config) {
			c.Masters = append(c.Masters, "[::1]:6379", "redis.example:6379")
		}, nil},

		// listen
		{"listen empty", func(c *config.Config) { c.Listen = "" }, []string{"listen: required"}},
		{"listen missing port", func(c *config.Config) { c.Listen = "localhost" }, []string{`listen: "localhost": missing port`}},
		{"listen any host, any port", func(c *config.Config) { c.Listen = ":0" }, nil},
		{"listen bad port", func(c *config.Config) { c.Listen = "127.0.0.1:70000" }, []string{
			`listen: "127.0.0.1:70000": port must be a number from 0 to 65535`,
		}},

		// TLS
		{"tls", func(c *config.Config) { c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile = "c.pem", "k.pem", "ca.pem" }, nil},
		{"tls cert without key", func(c *config.Config) { c.TLSCertFile = "c.pem" }, []string{"tls_key_file: required with tls_cert_file"}},
		{"tls key without cert", func(c *config.Config) { c.TLSKeyFile = "k.pem" }, []string{"tls_cert_file: required with tls_key_file"}},
		{"tls client CA without TLS", func(c *config.Config) { c.TLSClientCAFile = "ca.pem" }, []string{
			"tls_client_ca_file: needs tls_cert_file and tls_key_file: client certificates are checked only over TLS",
		}},

		// master auth and TLS
		{"master ACL user and TLS", func(c *config.Config) {
			c.MasterUsername, c.MasterTLS, c.MasterTLSCAFile, c.MasterTLSServerName = "redlockd", true, "ca.pem", "redis.internal"
			c.MasterTLSCertFile, c.MasterTLSKeyFile = "c.pem", "k.pem"
		}, nil},
		{"master user without password", func(c *config.Config) { c.MasterUsername, c.MasterPassword = "redlockd", "" }, []string{
			"master_username: needs master_password or master_password_file",
		}},
		{"master user with a space", func(c *config.Config) { c.MasterUsername = "red lockd" }, []string{
			"master_username: only printable ASCII without spaces is allowed (Redis ACL user names)",
		}},
		{"master TLS files without master_tls", func(c *config.Config) { c.MasterTLSCAFile, c.MasterTLSServerName = "ca.pem", "r" }, []string{
			"master_tls_ca_file: needs master_tls: true",
			"master_tls_server_name: needs master_tls: true",
		}},
		{"master TLS cert without key", func(c *config.Config) { c.MasterTLS, c.MasterTLSCertFile = true, "c.pem" }, []string{
			"master_tls_key_file: required with master_tls_cert_file",
		}},

		// admin
		{"admin listener", func(c *config.Config) { c.AdminListen = "127.0.0.1:7071"; c.AdminToken = secretKey2 }, nil},
		{"admin listener bad", func(c *config.Config) { c.AdminListen = "localhost" }, []string{`admin_listen: "localhost": missing port`}},
		{"admin listener is listen", func(c *config.Config) { c.AdminListen = c.Listen }, []string{
			`admin_listen: "127.0.0.1:7070" is also listen: the operator listener needs an address of its own`,
		}},
		{"admin token without admin listener", func(c *config.Config) { c.AdminToken = secretKey2 }, []string{
			"admin_token: needs admin_listen: the token guards the admin listener only",
		}},
		{"admin token short", func(c *config.Config) { c.AdminListen = ":7071"; c.AdminToken = "s3cret" }, []string{
			"admin_token: too short (6 bytes, need ≥ 16)",
		}},
		{"admin token from its file, short", func(c *config.Config) {
			c.AdminListen, c.AdminTokenFile, c.AdminToken = ":7071", "/etc/redlockd/admin.token", "s3cret"
		}, []string{
			"admin_token_file (/etc/redlockd/admin.token): too short (6 bytes, need ≥ 16)",
		}},

		// masters
		{"masters none", func(c *config.Config) { c.Masters = nil }, []string{"masters: 0 given, need an odd number ≥ 3"}},
		{"masters one", func(c *config.Config) { c.Masters = c.Masters[:1] }, []string{"masters: 1 given, need an odd number ≥ 3"}},
		{"masters even", func(c *config.Config) { c.Masters = append(c.Masters, "127.0.0.1:6382") }, []string{
			"masters: 4 given, need an odd number ≥ 3",
		}},
		{"master missing port", func(c *config.Config) { c.Masters[2] = "127.0.0.1" }, []string{
			`masters[2]: "127.0.0.1": missing port`,
		}},
		{"master missing host", func(c *config.Config) { c.Masters[1] = ":6379" }, []string{`masters[1]: ":6379": missing host`}},
		{"master empty", func(c *config.Config) { c.Masters[0] = "" }, []string{"masters[0]: empty"}},
		{"master port 0", func(c *config.Config) { c.Masters[0] = "h:0" }, []string{
			`masters[0]: "h:0": port must be a number from 1 to 65535`,
		}},
		{"master port name", func(c *config.Config) { c.Masters[0] = "h:redis" }, []string{
			`masters[0]: "h:redis": port must be a number from 1 to 65535`,
		}},
		{"master bare IPv6", func(c *config.Config) { c.Masters[0] = "::1:6379" }, []string{
			`masters[0]: "::1:6379": too many colons (write an IPv6 address as "[::1]:6379")`,
		}},
		{"master URL with password is not echoed", func(c *config.Config) {
			c.Masters[0] = "redis://:" + secretPassword + "@h:6379"
		}, []string{"masters[0]: want host:port, not a URL"}},
		{"master duplicate", func(c *config.Config) { c.Masters[2] = "127.0.0.1:6379" }, []string{
			`masters[2]: "127.0.0.1:6379" duplicates masters[0]`,
		}},
		{"master duplicate, other spelling", func(c *config.Config) {
			c.Masters = []string{"LocalHost:6379", "localhost:06379", "[::1]:1", "[0:0:0:0:0:0:0:1]:1", "h:1"}
		}, []string{
			`masters[1]: "localhost:06379" duplicates masters[0]`,
			`masters[3]: "[0:0:0:0:0:0:0:1]:1" duplicates masters[2]`,
		}},

		// api_keys
		{"api_keys none", func(c *config.Config) { c.APIKeys = nil }, []string{"api_keys: none given, need at least one"}},
		{"api key by sha256", func(c *config.Config) {
			c.APIKeys = []config.APIKey{{Name: "a-b_c.9", KeySHA256: secretKeySHA}}
		}, nil},
		{"api key name missing", func(c *config.Config) { c.APIKeys[0].Name = "" }, []string{"api_keys[0].name: required"}},
		{"api key name too long", func(c *config.Config) { c.APIKeys[0].Name = strings.Repeat("n", 65) }, []string{
			"api_keys[0].name: 65 characters, the limit is 64",
		}},
		{"api key name bad characters, not echoed", func(c *config.Config) { c.APIKeys[0].Name = secretKey2 + "/" }, []string{
			"api_keys[0].name: only A-Z a-z 0-9 _ . - are allowed",
		}},
		{"api key neither", func(c *config.Config) { c.APIKeys[0].Key = "" }, []string{"api_keys[0]: set one of key or key_sha256"}},
		{"api key both", func(c *config.Config) { c.APIKeys[0].KeySHA256 = secretKeySHA }, []string{
			"api_keys[0]: set key or key_sha256, not both",
		}},
		{"api key too short", func(c *config.Config) { c.APIKeys[0].Key = "s3cret-12345" }, []string{
			"api_keys[0].key: too short (12 bytes, need ≥ 16)",
		}},
		{"api key control character", func(c *config.Config) { c.APIKeys[0].Key = secretKey + "\n" }, []string{
			"api_keys[0].key: only printable ASCII is allowed (the key travels in an HTTP header)",
		}},
		{"api key trailing space", func(c *config.Config) { c.APIKeys[0].Key = secretKey + " " }, []string{
			"api_keys[0].key: starts or ends with a space, which HTTP drops from header values",
		}},
		{"api key sha256 short", func(c *config.Config) {
			c.APIKeys = append(c.APIKeys, config.APIKey{Name: "ops", KeySHA256: secretKeySHA[:63]})
		}, []string{"api_keys[1].key_sha256: want 64 hex characters"}},
		{"api key sha256 not hex", func(c *config.Config) {
			c.APIKeys = append(c.APIKeys, config.APIKey{Name: "ops", KeySHA256: strings.Repeat("g", 64)})
		}, []string{"api_keys[1].key_sha256: want 64 hex characters"}},
		{"api key sha256 upper case", func(c *config.Config) {
			c.APIKeys = append(c.APIKeys, config.APIKey{Name: "ops", KeySHA256: strings.ToUpper(sha256Hex(secretKey2))})
		}, []string{"api_keys[1].key_sha256: want lowercase hex"}},
		{"api key names unique", func(c *config.Config) {
			c.APIKeys = append(c.APIKeys, config.APIKey{Name: "shop", Key: secretKey2})
		}, []string{"api_keys[1].name: same name as api_keys[0]"}},
		{"api keys unique, across key and key_sha256", func(c *config.Config) {
			c.APIKeys = append(c.APIKeys,
				config.APIKey{Name: "ops", Key: secretKey2},
				config.APIKey{Name: "dev", KeySHA256: secretKeySHA})
		}, []string{"api_keys[2]: same key as api_keys[0]"}},

		// key_prefix
		{"key_prefix empty", func(c *config.Config) { c.KeyPrefix = "" }, []string{"key_prefix: required"}},
		{"key_prefix space", func(c *config.Config) { c.KeyPrefix = "red lock:" }, []string{
			`key_prefix: "red lock:": must not contain spaces or control characters`,
		}},
		{"key_prefix control", func(c *config.Config) { c.KeyPrefix = "rl\x00" }, []string{
			`key_prefix: "rl\x00": must not contain spaces or control characters`,
		}},
		{"key_prefix too long", func(c *config.Config) { c.KeyPrefix = strings.Repeat("p", 65) }, []string{
			"key_prefix: 65 bytes, the limit is 64",
		}},
		{"key_prefix not UTF-8", func(c *config.Config) { c.KeyPrefix = "rl\xff" }, []string{"key_prefix: not valid UTF-8"}},

		// extra_votes
		{"extra_votes 1 of 3", func(c *config.Config) { c.ExtraVotes = 1 }, nil},
		{"extra_votes above", func(c *config.Config) { c.ExtraVotes = 2 }, []string{
			"extra_votes: 2 is out of range, need 0 to 1 with 3 masters (quorum 2 + extra votes ≤ masters)",
		}},
		{"extra_votes negative", func(c *config.Config) { c.ExtraVotes = -1 }, []string{
			"extra_votes: -1 is out of range, need 0 to 1 with 3 masters (quorum 2 + extra votes ≤ masters)",
		}},

		// per_master_timeout
		{"per_master_timeout high", func(c *config.Config) { c.PerMasterTimeout = ms(10 * time.Second) }, []string{
			"per_master_timeout: 10s is above the limit of 5s",
		}},
		{"per_master_timeout low", func(c *config.Config) { c.PerMasterTimeout = ms(500 * time.Microsecond) }, []string{
			"per_master_timeout: 500µs is below the minimum of 1ms",
		}},
		{"per_master_timeout bounds", func(c *config.Config) { c.PerMasterTimeout = ms(5 * time.Second) }, nil},

		// drift_factor
		{"drift_factor 0", func(c *config.Config) { c.DriftFactor = 0 }, nil},
		{"drift_factor 0.1", func(c *config.Config) { c.DriftFactor = 0.1 }, nil},
		{"drift_factor 0.4", func(c *config.Config) { c.DriftFactor = 0.4 }, []string{
			"drift_factor: 0.4 is out of range, need 0 ≤ x ≤ 0.1",
		}},
		{"drift_factor negative", func(c *config.Config) { c.DriftFactor = -0.1 }, []string{
			"drift_factor: -0.1 is out of range, need 0 ≤ x ≤ 0.1",
		}},

		// TTLs
		{"max_ttl 0", func(c *config.Config) { c.MaxTTL = 0 }, []string{"max_ttl: 0 is below the minimum of 1"}},
		{"max_ttl high", func(c *config.Config) { c.MaxTTL = 86401 }, []string{"max_ttl: 86401 is above the limit of 86400"}},
		{"auth_failures_per_minute 0", func(c *config.Config) { c.AuthFailuresPerMinute = 0 }, []string{"auth_failures_per_minute: 0 is below the minimum of 1"}},
		{"auth_failure_burst high", func(c *config.Config) { c.AuthFailureBurst = 1_000_001 }, []string{"auth_failure_burst: 1000001 is above the limit of 1000000"}},
		{"auth_failure_sources 0", func(c *config.Config) { c.AuthFailureSources = 0 }, []string{"auth_failure_sources: 0 is below the minimum of 1"}},
		{"default_ttl 0", func(c *config.Config) { c.DefaultTTL = 0 }, []string{"default_ttl: 0 is below the minimum of 1"}},
		{"built-in default_ttl follows max_ttl down", func(c *config.Config) { c.MaxTTL = 10 }, nil},
		{"chosen default_ttl above max_ttl", func(c *config.Config) { c.MaxTTL = 10; c.DefaultTTL = 60 }, []string{
			"default_ttl: 60 is above max_ttl (10)",
		}},

		// the rest
		{"max_wait 0", func(c *config.Config) { c.MaxWait = 0 }, nil},
		{"max_wait high", func(c *config.Config) { c.MaxWait = ms(11 * time.Minute) }, []string{
			"max_wait: 11m0s is above the limit of 10m0s",
		}},
		{"max_body_bytes low", func(c *config.Config) { c.MaxBodyBytes = 1000 }, []string{
			"max_body_bytes: 1000 is below the minimum of 1024",
		}},
		{"max_body_bytes high", func(c *config.Config) { c.MaxBodyBytes = 1<<20 + 1 }, []string{
			"max_body_bytes: 1048577 is above the limit of 1048576",
		}},
		{"health_interval low", func(c *config.Config) { c.HealthInterval = ms(10 * time.Millisecond) }, []string{
			"health_interval: 10ms is below the minimum of 50ms",
		}},
		{"health_interval high", func(c *config.Config) { c.HealthInterval = ms(2 * time.Minute) }, []string{
			"health_interval: 2m0s is above the limit of 1m0s",
		}},
		{"drain_delay above 5m", func(c *config.Config) { c.DrainDelay = config.Duration(6 * time.Minute) }, []string{"drain_delay: 6m0s is above the limit of 5m0s"}},
		{"shutdown_timeout 0", func(c *config.Config) { c.ShutdownTimeout = 0 }, []string{"shutdown_timeout: 0s must be more than 0"}},
		{"log_format", func(c *config.Config) { c.LogFormat = "xml" }, []string{
			`log_format: "xml" is not one of: json, console`,
		}},
		{"log_level", func(c *config.Config) { c.LogLevel = "INFO" }, []string{
			`log_level: "INFO" is not one of: debug, info, warn, error`,
		}},

		// account limits
		{"quota calls 0 with a window", func(c *config.Config) {
			c.AccountDefaults.Quota = &config.Quota{Calls: 0, Per: ms(time.Hour)}
		}, []string{"account_defaults.quota.calls: 0 is below the minimum of 1"}},
		{"quota without a window", func(c *config.Config) { c.APIKeys[0].Quota = &config.Quota{Calls: 10} }, []string{
			"api_keys[0].quota.per: 0s is below the minimum of 1s",
		}},
		{"quota window too long", func(c *config.Config) {
			c.APIKeys[0].Quota = &config.Quota{Calls: 10, Per: ms(800 * time.Hour)}
		}, []string{"api_keys[0].quota.per: 800h0m0s is above the limit of 744h0m0s"}},
		{"quota calls too many", func(c *config.Config) {
			c.AccountDefaults.Quota = &config.Quota{Calls: 2e12, Per: ms(time.Hour)}
		}, []string{"account_defaults.quota.calls: 2000000000000 is above the limit of 1000000000000"}},
		{"quota unlimited", func(c *config.Config) { c.APIKeys[0].Quota = &config.Quota{} }, nil},
		{"rate negative", func(c *config.Config) { c.AccountDefaults.Rate = ptr(-1.0) }, []string{
			"account_defaults.rate: -1 is out of range, need 0 (no limit) to 1000000 calls per second",
		}},
		{"rate too high", func(c *config.Config) { c.APIKeys[0].Rate = ptr(2e6) }, []string{
			"api_keys[0].rate: 2e+06 is out of range, need 0 (no limit) to 1000000 calls per second",
		}},
		{"burst 0", func(c *config.Config) { c.APIKeys[0].Rate = ptr(5.0); c.APIKeys[0].Burst = ptr(0) }, []string{
			"api_keys[0].burst: 0 is below the minimum of 1",
		}},
		{"burst without a rate", func(c *config.Config) { c.APIKeys[0].Burst = ptr(10) }, []string{
			"api_keys[0].burst: set, but no rate applies to this account (rate here or in account_defaults): a burst needs a rate",
		}},
		{"default burst without a default rate", func(c *config.Config) { c.AccountDefaults.Burst = ptr(10) }, []string{
			"account_defaults.burst: set, but account_defaults.rate is not: a burst needs a rate",
		}},
		{"burst with the default rate", func(c *config.Config) { c.AccountDefaults.Rate = ptr(5.0); c.APIKeys[0].Burst = ptr(10) }, nil},
		{"max_locks negative", func(c *config.Config) { c.APIKeys[0].MaxLocks = ptr(-1) }, []string{
			"api_keys[0].max_locks: -1 is below the minimum of 0",
		}},
		{"max_locks too high", func(c *config.Config) { c.AccountDefaults.MaxLocks = ptr(200_000_000) }, []string{
			"account_defaults.max_locks: 200000000 is above the limit of 100000000",
		}},
		{"lock_delay too long", func(c *config.Config) { c.AccountDefaults.LockDelay = ptr(ms(61 * time.Second)) }, []string{
			"account_defaults.lock_delay: 1m1s is above the limit of 1m0s",
		}},
		{"lock_delay not whole milliseconds", func(c *config.Config) { c.APIKeys[0].LockDelay = ptr(ms(1500 * time.Microsecond)) }, []string{
			"api_keys[0].lock_delay: 1.5ms is not a whole number of milliseconds",
		}},
		{"lock_delay leaves no room under max_ttl", func(c *config.Config) {
			c.MaxTTL, c.DefaultTTL = 10, 5
			c.APIKeys[0].LockDelay = ptr(ms(9500 * time.Millisecond))
		}, []string{
			"api_keys[0].lock_delay: 9.5s is above max_ttl (10 s) − 1s, so no acquire could take it",
		}},
		{"lock_delay at max_ttl − 1s", func(c *config.Config) {
			c.MaxTTL, c.DefaultTTL = 10, 1
			c.AccountDefaults.LockDelay = ptr(ms(9 * time.Second))
		}, nil},
		{"lock_delay + default_ttl above max_ttl", func(c *config.Config) {
			c.MaxTTL, c.DefaultTTL = 10, 5
			c.AccountDefaults.LockDelay = ptr(ms(9 * time.Second))
			c.APIKeys[0].LockDelay = ptr(ms(6 * time.Second))
		}, []string{
			"api_keys[0].lock_delay: 6s + default_ttl (5 s) is above max_ttl (10 s), so every acquire that sends no ttl would be refused; lower lock_delay or default_ttl",
			"account_defaults.lock_delay: 9s + default_ttl (5 s) is above max_ttl (10 s), so every acquire that sends no ttl would be refused; lower lock_delay or default_ttl",
		}},
		{"limits_sync_interval low", func(c *config.Config) { c.LimitsSyncInterval = ms(time.Millisecond) }, []string{
			"limits_sync_interval: 1ms is below the minimum of 10ms",
		}},
		{"limits_sync_interval high", func(c *config.Config) { c.LimitsSyncInterval = ms(time.Minute) }, []string{
			"limits_sync_interval: 1m0s is above the limit of 10s",
		}},

		{"all problems at once, in field order", func(c *config.Config) {
			c.Masters = []string{"127.0.0.1:6379", "127.0.0.1"}
			c.APIKeys[0].Key = "short"
			c.PerMasterTimeout = ms(10 * time.Second)
			c.LogLevel = ""
		}, []string{
			"masters: 2 given, need an odd number ≥ 3",
			`masters[1]: "127.0.0.1": missing port`,
			"api_keys[0].key: too short (5 bytes, need ≥ 16)",
			"per_master_timeout: 10s is above the limit of 5s",
			`log_level: "" is not one of: debug, info, warn, error`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.change(&c)
			err := c.Validate()
			if got := errorLines(err); !slices.Equal(got, tt.want) {
				t.Errorf("Validate() =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			assertNoSecrets(t, err)
			if err != nil {
				var fe *config.FieldError
				if !errors.As(err, &fe) || fe.Field == "" {
					t.Errorf("errors.As(%v, *FieldError) found no field", err)
				}
			}
		})
	}
}

func TestDefaultConfig(t *testing.T) {
	c := config.DefaultConfig()
	want := []string{
		"masters: 0 given, need an odd number ≥ 3",
		"api_keys: none given, need at least one",
	}
	if got := errorLines(c.Validate()); !slices.Equal(got, want) {
		t.Errorf("DefaultConfig().Validate() = %q, want only the required lists: %q", got, want)
	}
	if c.Listen != "127.0.0.1:7070" || c.KeyPrefix != "redlock:" ||
		c.PerMasterTimeout != config.Duration(50*time.Millisecond) || c.DriftFactor != 0.01 ||
		c.DefaultTTL != 30 || c.MaxTTL != 86400 || c.MaxWait != config.Duration(30*time.Second) ||
		c.MaxBodyBytes != 16384 || c.HealthInterval != config.Duration(time.Second) ||
		c.ShutdownTimeout != config.Duration(10*time.Second) || c.LogFormat != "json" || c.LogLevel != "info" {
		t.Errorf("DefaultConfig() = %+v", c)
	}
}

func TestEffectiveDefaultTTL(t *testing.T) {
	tests := []struct{ defaultTTL, maxTTL, want int }{
		{30, 86400, 30},
		{30, 10, 10},
		{5, 10, 5},
		{10, 10, 10},
	}
	for _, tt := range tests {
		c := config.DefaultConfig()
		c.DefaultTTL, c.MaxTTL = tt.defaultTTL, tt.maxTTL
		if got := c.EffectiveDefaultTTL(); got != tt.want {
			t.Errorf("EffectiveDefaultTTL() with default_ttl %d, max_ttl %d = %d, want %d",
				tt.defaultTTL, tt.maxTTL, got, tt.want)
		}
	}
}

func TestAPIKeyHash(t *testing.T) {
	want := sha256.Sum256([]byte(secretKey))
	tests := []struct {
		name string
		key  config.APIKey
		want [32]byte
	}{
		{"plaintext", config.APIKey{Name: "a", Key: secretKey}, want},
		{"sha256", config.APIKey{Name: "a", KeySHA256: secretKeySHA}, want},
		{"bad sha256 gives zero", config.APIKey{Name: "a", KeySHA256: "zz"}, [32]byte{}},
		{"bad hex gives zero", config.APIKey{Name: "a", KeySHA256: strings.Repeat("x", 64)}, [32]byte{}},
	}
	for _, tt := range tests {
		if got := tt.key.Hash(); got != tt.want {
			t.Errorf("%s: Hash() = %x, want %x", tt.name, got, tt.want)
		}
	}
}

func TestStringMasksSecrets(t *testing.T) {
	c := validConfig()
	c.APIKeys = append(c.APIKeys, config.APIKey{Name: "ops", KeySHA256: sha256Hex(secretKey2)})
	for _, s := range []string{c.String(), fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprint(c.APIKeys), c.APIKeys[0].String()} {
		if strings.Contains(s, secretKey) || strings.Contains(s, secretPassword) {
			t.Errorf("printed config reveals a secret:\n%s", s)
		}
	}
	if s := c.String(); !strings.Contains(s, "master_password: <secret>") || !strings.Contains(s, "per_master_timeout: 50ms") {
		t.Errorf("Config.String() =\n%s", s)
	}
	h := sha256.Sum256([]byte(secretKey))
	if got, want := c.APIKeys[0].String(), fmt.Sprintf("shop (key sha256 %x…)", h[:4]); got != want {
		t.Errorf("APIKey.String() = %q, want %q", got, want)
	}
}

func ExampleConfig_Validate() {
	c := config.DefaultConfig()
	c.Masters = []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3"}
	c.APIKeys = []config.APIKey{{Name: "shop", Key: "too-short"}}
	c.PerMasterTimeout = config.Duration(10 * time.Second)
	fmt.Println(c.Validate())
	// Output:
	// masters[2]: "10.0.0.3": missing port
	// api_keys[0].key: too short (9 bytes, need ≥ 16)
	// per_master_timeout: 10s is above the limit of 5s
}

// ValidateFields checks only the named fields and their parts.
func TestValidateFields(t *testing.T) {
	c := config.DefaultConfig()
	c.Masters = []string{"a:1", "b:2", "a:1"}
	c.Listen = ""
	if err := c.ValidateFields("key_prefix", "max_ttl"); err != nil {
		t.Errorf("ValidateFields(key_prefix, max_ttl) = %v, want nil: no api_keys needed", err)
	}
	err := c.ValidateFields("masters", "key_prefix")
	if err == nil || err.Error() != `masters[2]: "a:1" duplicates masters[0]` {
		t.Errorf("ValidateFields(masters) = %v", err)
	}
	if err := c.ValidateFields(); err == nil || !strings.Contains(err.Error(), "api_keys") || !strings.Contains(err.Error(), "listen") {
		t.Errorf("ValidateFields() = %v, want every problem", err)
	}
}

func TestAccountLimits(t *testing.T) {
	c := validConfig()
	if got := c.AccountLimits(c.APIKeys[0]); got != (config.AccountLimits{MaxLocks: config.DefaultMaxLocks, MaxIdempotencyBytes: config.DefaultMaxIdempotencyBytes}) {
		t.Errorf("defaults: %+v, want only max_locks %d and max_idempotency_bytes %d", got, config.DefaultMaxLocks, config.DefaultMaxIdempotencyBytes)
	}
	c.AccountDefaults = config.Limits{
		Quota: &config.Quota{Calls: 100, Per: config.Duration(time.Hour)}, Rate: ptr(2.5), MaxLocks: ptr(7),
		LockDelay: ptr(config.Duration(15 * time.Second)),
	}
	own := config.APIKey{Name: "own", Limits: config.Limits{Quota: &config.Quota{}, Burst: ptr(9), MaxLocks: ptr(0), LockDelay: ptr(config.Duration(0))}}
	if got, want := c.AccountLimits(c.APIKeys[0]), (config.AccountLimits{
		QuotaCalls: 100, QuotaPer: time.Hour, Rate: 2.5, Burst: 3, MaxLocks: 7, LockDelay: 15 * time.Second,
	}); got != want {
		t.Errorf("inherited: %+v, want %+v (burst: the rate rounded up)", got, want)
	}
	if got, want := c.AccountLimits(own), (config.AccountLimits{Rate: 2.5, Burst: 9}); got != want {
		t.Errorf("overridden: %+v, want %+v (quota unlimited, no lock cap, no lock-delay)", got, want)
	}
}
