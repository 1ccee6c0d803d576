package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is everything the daemon needs to run. Field comments give the
// YAML name, the default (see [DefaultConfig]) and the range Validate
// enforces.
type Config struct {
	// Listen is the host:port the HTTP API listens on. Default
	// "127.0.0.1:7070"; an empty host listens on every interface.
	Listen string `yaml:"listen"`
	// TLSCertFile and TLSKeyFile, if set (both or neither), are the PEM
	// certificate chain and key the listeners serve HTTPS with (TLS 1.2 at
	// least; both the public and the admin listener). Read again on
	// SIGHUP and POST /admin/reload: new connections get the new
	// certificate, open ones keep theirs. Default none: plain HTTP.
	TLSCertFile string `yaml:"tls_cert_file,omitempty"`
	TLSKeyFile  string `yaml:"tls_key_file,omitempty"`
	// TLSClientCAFile, if set, is a PEM file of CA certificates: every
	// client must then present a certificate signed by one of them (mutual
	// TLS), on both listeners. Needs TLSCertFile. Default none.
	TLSClientCAFile string `yaml:"tls_client_ca_file,omitempty"`
	// AdminListen, if set, is the host:port of the operator listener: the
	// dashboard, /metrics, /v1/stats, /v1/history and POST /admin/reload
	// move there from Listen (which keeps the lock API, /healthz, /readyz
	// and /openapi.yaml), with GET /admin/locks. Default "" (no admin
	// listener: the operator endpoints stay on Listen and /admin/reload
	// and /admin/locks are not served). Must
	// differ from Listen.
	AdminListen string `yaml:"admin_listen,omitempty"`
	// AdminToken, if set, is required on every request to AdminListen, as
	// "Authorization: Bearer <token>" or as the password of HTTP basic
	// authentication (any user name). At least 16 bytes of printable
	// ASCII. Needs AdminListen. Default none: the admin listener is then
	// meant for loopback or a private network.
	AdminToken string `yaml:"admin_token,omitempty"`
	// AdminTokenFile names a file holding AdminToken (one line; a final
	// newline is dropped), so that the token stays out of this file and
	// the environment. Set AdminToken or AdminTokenFile, not both.
	AdminTokenFile string `yaml:"admin_token_file,omitempty"`
	// Masters are the host:port addresses of the independent Redis
	// masters. Required: an odd number, at least 3, no duplicates. An even
	// count tolerates no more failures than one master fewer.
	Masters []string `yaml:"masters"`
	// MasterGroups, instead of Masters, spread the keys over several
	// groups of independent masters, each with its own quorum, health,
	// quarantine, lease horizons, fencing counters and clock judgement;
	// every key is placed on one group by rendezvous hashing
	// (redlock.Placement). Each group: a name (1-32 characters from a-z
	// 0-9 -, unique) and an odd number, at least 3, of masters; no master
	// in two groups. Default none: Masters is the one group, named
	// DefaultGroupName. Set Masters or MasterGroups, not both.
	MasterGroups []MasterGroup `yaml:"master_groups,omitempty"`
	// PreviousMasterGroups, while the set of groups changes, is the
	// master_groups (or, as one group DefaultGroupName, the masters) the
	// deployment had before: the daemon then locks each key whose group
	// changes in its previous group and in its new one (redlock.Moving).
	// A group named in both lists must have the same masters in both.
	// Default none. docs/operations.md, "Changing the master groups".
	PreviousMasterGroups []MasterGroup `yaml:"previous_master_groups,omitempty"`
	// MasterUsername, if set, is the Redis ACL user the daemon
	// authenticates as on every master (AUTH username password); it needs
	// MasterPassword. Default: Redis's default user. docs/operations.md ("TLS") gives the
	// least-privilege ACL line for it.
	MasterUsername string `yaml:"master_username,omitempty"`
	// MasterPassword, if set, is sent with AUTH to every master.
	MasterPassword string `yaml:"master_password,omitempty"`
	// MasterPasswordFile names a file holding MasterPassword (one line; a
	// final newline is dropped). Set MasterPassword or MasterPasswordFile,
	// not both.
	MasterPasswordFile string `yaml:"master_password_file,omitempty"`
	// MasterTLS makes every connection to the masters TLS (TLS 1.2 at
	// least), verifying the masters' certificates against MasterTLSCAFile
	// (default: the system's CAs) and the name MasterTLSServerName
	// (default: each master's host). Default false.
	MasterTLS bool `yaml:"master_tls,omitempty"`
	// MasterTLSCAFile is a PEM file of the CAs the masters' certificates
	// chain to. Needs MasterTLS.
	MasterTLSCAFile string `yaml:"master_tls_ca_file,omitempty"`
	// MasterTLSServerName, if set, is the name every master's certificate
	// must carry, for masters addressed by IP whose certificates name a
	// host. Needs MasterTLS.
	MasterTLSServerName string `yaml:"master_tls_server_name,omitempty"`
	// MasterTLSCertFile and MasterTLSKeyFile (both or neither) are the
	// client certificate presented to masters that require one
	// (tls-auth-clients yes, Redis's default). Read again on SIGHUP and
	// POST /admin/reload for new connections. Needs MasterTLS.
	MasterTLSCertFile string `yaml:"master_tls_cert_file,omitempty"`
	MasterTLSKeyFile  string `yaml:"master_tls_key_file,omitempty"`
	// APIKeys are the accounts (tenants) allowed to call the API. At least
	// one; names and keys unique.
	APIKeys []APIKey `yaml:"api_keys"`
	// KeyPrefix starts every Redis key the daemon writes. Default
	// "redlock:"; non-empty, at most 64 bytes, no spaces or control
	// characters.
	KeyPrefix string `yaml:"key_prefix"`
	// PerMasterTimeout bounds each call to one master, counted from when
	// the command is written (redlock.WithPerMasterTimeout). Default 50ms;
	// 1ms to 5s.
	PerMasterTimeout Duration `yaml:"per_master_timeout"`
	// DriftFactor is the share of the TTL allowed for clock drift between
	// the daemon and the masters (Redlock: drift = ttl × factor + 2ms).
	// Default 0.01; 0 ≤ factor ≤ 0.1. Daemons sharing masters judge clocks
	// by the smallest factor any of them registered and budget validities
	// for the largest.
	DriftFactor float64 `yaml:"drift_factor"`
	// DefaultTTL is the lock TTL, in seconds, when a request gives none.
	// Default 30; 1 to 86400. Use [Config.EffectiveDefaultTTL], which
	// lowers the built-in 30 to MaxTTL when MaxTTL is smaller.
	DefaultTTL int `yaml:"default_ttl"`
	// MaxTTL is the longest TTL, in seconds, a request may ask for.
	// Default 86400; 1 to 86400.
	MaxTTL int `yaml:"max_ttl"`
	// MaxWait caps a request's wait_ms. Default 30s; 0 (no waiting) to 10m.
	MaxWait Duration `yaml:"max_wait"`
	// MaxWaiters caps the acquires with wait_ms waiting in one daemon, and
	// MaxWaitersPerAccount those of one account (429 too_many_waiters
	// beyond). Defaults 10000 and 1000; 1 to 1000000.
	MaxWaiters           int `yaml:"max_waiters"`
	MaxWaitersPerAccount int `yaml:"max_waiters_per_account"`
	// AuthFailuresPerMinute, AuthFailureBurst and AuthFailureSources limit
	// failed authentications per source (client IPv4 address or IPv6
	// /64): each request without a valid X-API-Key takes one of
	// AuthFailureBurst tokens, refilled at AuthFailuresPerMinute; a source
	// with none left gets 429 too_many_auth_failures, whatever key it
	// sends, until one is back. At most AuthFailureSources sources are
	// remembered. Defaults 60, 20 and 10000; 1 to 1000000 each.
	AuthFailuresPerMinute int `yaml:"auth_failures_per_minute"`
	AuthFailureBurst      int `yaml:"auth_failure_burst"`
	AuthFailureSources    int `yaml:"auth_failure_sources"`
	// MaxBodyBytes is the largest request body accepted. Default 16384;
	// 1024 to 1048576 (1 MiB).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// IdempotencyMaxRetention caps an idempotency record's retention, and
	// is how long a master repaired after a data loss stays out of record
	// answers (redlock/idempotency): every daemon of a deployment must use
	// the same or a longer one. Default 168h (7 days); 1m to 168h.
	IdempotencyMaxRetention Duration `yaml:"idempotency_max_retention"`
	// IdempotencyMaxAnswerBytes caps a stored answer (body and headers).
	// Default 65536; 1024 to 1048576.
	IdempotencyMaxAnswerBytes int `yaml:"idempotency_max_answer_bytes"`
	// HealthInterval is how often every master is probed. Default 1s;
	// 50ms to 1m.
	HealthInterval Duration `yaml:"health_interval"`
	// ExtraVotes is how many votes beyond the quorum an acquire and an
	// extend need (redlock.WithExtraVotes). Default 0; 0 to masters −
	// quorum. k extra votes survive 2k masters silently losing a lock,
	// and k fewer masters down.
	ExtraVotes int `yaml:"extra_votes"`
	// DrainDelay is how long, after SIGTERM, the daemon keeps serving with
	// /readyz answering 503 and every answer closing its connection, so
	// that load balancers stop sending and keep-alive clients move off
	// before the listener closes. Default 1s; 0 to 5m.
	DrainDelay Duration `yaml:"drain_delay"`
	// ShutdownTimeout is how long in-flight requests may run after the
	// drain delay. Default 10s; must be positive.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	// AccountDefaults are the limits of every account that does not set
	// its own (see Limits): no quota and no rate limit by default, and
	// max_locks DefaultMaxLocks.
	AccountDefaults Limits `yaml:"account_defaults"`
	// LimitsSyncInterval is how often each daemon writes its accounts'
	// call counts and lock changes to the masters and reads the other
	// daemons'. Default 100ms; 10ms to 10s. It bounds how far replicas
	// can overshoot a shared limit (see docs/api.md, "Quotas and limits").
	LimitsSyncInterval Duration `yaml:"limits_sync_interval"`
	// LogFormat is "json" (default) or "console".
	LogFormat string `yaml:"log_format"`
	// LogLevel is "debug", "info" (default), "warn" or "error".
	LogLevel string `yaml:"log_level"`
}

// APIKey is one account (tenant) and its key. Exactly one of Key and
// KeySHA256 is set; the daemon only ever compares [APIKey.Hash] values.
type APIKey struct {
	// Name is the account name, 1-64 characters from A-Z a-z 0-9 _ . -.
	// Locks live in a space of their own per account.
	Name string `yaml:"name"`
	// Key is the key as clients send it in X-API-Key: at least 16 bytes of
	// printable ASCII with no leading or trailing space.
	Key string `yaml:"key,omitempty"`
	// KeySHA256 is the lowercase hex SHA-256 of the key (64 characters),
	// for files that should not hold the key itself:
	//	printf %s "$KEY" | sha256sum
	KeySHA256 string `yaml:"key_sha256,omitempty"`
	// Limits override account_defaults for this account, field by field.
	Limits `yaml:",inline"`
}

// Built-in defaults; DefaultConfig and the flag help texts use them.
const (
	defaultListen           = "127.0.0.1:7070"
	defaultKeyPrefix        = "redlock:"
	defaultPerMasterTimeout = 50 * time.Millisecond
	defaultDriftFactor      = 0.01
	defaultDefaultTTL       = 30
	defaultMaxTTL           = int(maxTTLLimit)
	defaultMaxWait          = 30 * time.Second
	defaultMaxBodyBytes     = 16384
	defaultHealthInterval   = time.Second
	// defaultIdempotencyMaxRetention and defaultIdempotencyMaxAnswerBytes
	// are redlock/idempotency's own defaults.
	defaultIdempotencyMaxRetention   = 7 * 24 * time.Hour
	defaultIdempotencyMaxAnswerBytes = 64 << 10
	defaultDrainDelay                = time.Second
	defaultShutdownTimeout           = 10 * time.Second
	defaultLogFormat                 = "json"
	defaultLogLevel                  = "info"
)

// DefaultConfig returns a Config with every default set. Masters and APIKeys
// have no default, so it does not pass Validate on its own.
func DefaultConfig() Config {
	return Config{
		Listen:                    defaultListen,
		KeyPrefix:                 defaultKeyPrefix,
		PerMasterTimeout:          Duration(defaultPerMasterTimeout),
		DriftFactor:               defaultDriftFactor,
		DefaultTTL:                defaultDefaultTTL,
		MaxTTL:                    defaultMaxTTL,
		MaxWait:                   Duration(defaultMaxWait),
		MaxBodyBytes:              defaultMaxBodyBytes,
		MaxWaiters:                10000,
		MaxWaitersPerAccount:      1000,
		AuthFailuresPerMinute:     60,
		AuthFailureBurst:          20,
		AuthFailureSources:        10000,
		HealthInterval:            Duration(defaultHealthInterval),
		IdempotencyMaxRetention:   Duration(defaultIdempotencyMaxRetention),
		IdempotencyMaxAnswerBytes: defaultIdempotencyMaxAnswerBytes,
		DrainDelay:                Duration(defaultDrainDelay),
		ShutdownTimeout:           Duration(defaultShutdownTimeout),
		AccountDefaults:           Limits{MaxLocks: intPtr(DefaultMaxLocks), MaxIdempotencyBytes: intPtr(DefaultMaxIdempotencyBytes)},
		LimitsSyncInterval:        Duration(defaultLimitsSyncInterval),
		LogFormat:                 defaultLogFormat,
		LogLevel:                  defaultLogLevel,
	}
}

// EffectiveDefaultTTL is the TTL, in seconds, for a request that gives
// none: DefaultTTL, lowered to MaxTTL when that is smaller. Validate
// rejects a DefaultTTL other than the built-in 30 that is above MaxTTL, so
// the lowering only ever applies to the built-in default.
func (c Config) EffectiveDefaultTTL() int {
	return min(c.DefaultTTL, c.MaxTTL)
}

// Hash is the SHA-256 of the key: computed from Key, or decoded from
// KeySHA256. The daemon compares keys only by this hash, in constant time.
// For a KeySHA256 that Validate would reject, Hash returns the zero array,
// which no key hashes to in practice.
func (k APIKey) Hash() [32]byte {
	if k.Key != "" {
		return sha256.Sum256([]byte(k.Key))
	}
	var h [32]byte
	if len(k.KeySHA256) != hex.EncodedLen(len(h)) {
		return [32]byte{}
	}
	if _, err := hex.Decode(h[:], []byte(k.KeySHA256)); err != nil {
		return [32]byte{}
	}
	return h
}

// String names the account and shows the first 4 bytes of the key's hash,
// never the key, so an APIKey can be printed or logged.
func (k APIKey) String() string {
	h := k.Hash()
	return fmt.Sprintf("%s (key sha256 %x…)", k.Name, h[:4])
}

const masked = "<secret>"

// String renders c as YAML with the master password, the admin token and
// plaintext API keys replaced by "<secret>", so a Config can be printed or
// logged.
func (c Config) String() string {
	if c.MasterPassword != "" {
		c.MasterPassword = masked
	}
	if c.AdminToken != "" {
		c.AdminToken = masked
	}
	keys := make([]APIKey, len(c.APIKeys))
	for i, k := range c.APIKeys {
		keys[i] = k
		if k.Key != "" {
			keys[i].Key = masked
		}
	}
	c.APIKeys = keys
	b, err := yaml.Marshal(c)
	if err != nil {
		// Every field marshals; this cannot happen.
		return "config: " + err.Error()
	}
	return string(b)
}
