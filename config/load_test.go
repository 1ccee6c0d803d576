package config_test

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/config"
)

// writeFile writes content to redlockd.yaml in a fresh directory and
// returns its path.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "redlockd.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// env returns a lookup function over a fixed map, like os.LookupEnv.
func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

// parsedFlags registers the config flags on a new flag set and parses args.
func parsedFlags(t *testing.T, args ...string) *flag.FlagSet {
	t.Helper()
	fs := flag.NewFlagSet("redlockd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c config.Config
	c.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("Parse(%q): %v", args, err)
	}
	return fs
}

const validYAML = `
masters: ["127.0.0.1:6379", "127.0.0.1:6380", "127.0.0.1:6381"]
master_password: ` + secretPassword + `
api_keys:
  - name: shop
    key: ` + secretKey + `
`

func TestLoadFile(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		want    func(c *config.Config) // changes to DefaultConfig
		wantErr []string               // after the file name and ": "
	}{
		{"empty file", "", func(c *config.Config) {}, nil},
		{"comments only", "# nothing here\n", func(c *config.Config) {}, nil},
		{"null document", "---\n", func(c *config.Config) {}, nil},
		{"some fields", "listen: ':8080'\nper_master_timeout: 20ms\nmax_ttl: 600\nmasters: [a:1, b:2, c:3]\n", func(c *config.Config) {
			c.Listen = ":8080"
			c.PerMasterTimeout = config.Duration(20 * time.Millisecond)
			c.MaxTTL = 600
			c.Masters = []string{"a:1", "b:2", "c:3"}
		}, nil},
		{"empty block or list keeps the default", "masters:\naccount_defaults:\n", func(c *config.Config) {}, nil},
		{"empty string is a value", "master_tls_server_name: ''\n", func(c *config.Config) {}, nil},
		{"an entry given as one value", "api_keys:\n  - \"shop:" + secretKey + "\"\nmaster_groups:\n  - g0\nmaster_tls: " + secretKey + "\n", nil, []string{
			"line 2: api_keys[0]: one value where an api_keys entry (a mapping with name and key or key_sha256) goes",
			"line 4: master_groups[0]: one value where a master_groups entry (a mapping with name and masters) goes",
			"line 5: master_tls: must be true or false",
		}},
		{"an empty protection is refused", "tls_cert_file: ''\ntls_key_file: \"\"\nadmin_token: ''\ntls_client_ca_file: ''\n", nil, []string{
			"line 1: tls_cert_file: is empty, which leaves tls_cert_file off; give a value, or remove the line if it is meant to be off",
			"line 2: tls_key_file: is empty, which leaves tls_key_file off; give a value, or remove the line if it is meant to be off",
			"line 3: admin_token: is empty, which leaves admin_token off; give a value, or remove the line if it is meant to be off",
			"line 4: tls_client_ca_file: is empty, which leaves tls_client_ca_file off; give a value, or remove the line if it is meant to be off",
		}},
		{"empty value is refused", "listen:\nmax_ttl: ~\ndrift_factor: null\nper_master_timeout:\n", nil, []string{
			"line 1: listen: has no value; give one, or remove the line to keep the default",
			"line 2: max_ttl: has no value; give one, or remove the line to keep the default",
			"line 3: drift_factor: has no value; give one, or remove the line to keep the default",
			"line 4: per_master_timeout: has no value; give one, or remove the line to keep the default",
		}},
		{"key_sha256", "api_keys:\n  - name: shop\n    key_sha256: " + secretKeySHA + "\n", func(c *config.Config) {
			c.APIKeys = []config.APIKey{{Name: "shop", KeySHA256: secretKeySHA}}
		}, nil},
		{"unknown field", "listen: ':8080'\nlistn: ':9090'\n", nil, []string{
			`line 2: unknown field "listn"; did you mean "listen"?`,
		}},
		{"unknown field in an API key", "api_keys:\n  - name: shop\n    kee: x\n", nil, []string{
			`line 3: unknown field "kee"; did you mean "key"?`,
		}},
		{"unknown field in a master group", "master_groups:\n  - name: g0\n    mastrs: [a:1, b:2, c:3]\n", nil, []string{
			`line 3: unknown field "mastrs"; did you mean "masters"?`,
		}},
		{"unknown field close to a real one", "masterz:\n  - a:1\n", nil, []string{
			`line 1: unknown field "masterz"; did you mean "masters"?`,
		}},
		{"unknown field in upper case", "MAX_TTL: 60\n", nil, []string{
			`line 1: unknown field "MAX_TTL"; did you mean "max_ttl"?`,
		}},
		{"a list where a mapping belongs", "api_keys:\n  - x\n", nil, []string{
			"line 2: api_keys[0]: one value where an api_keys entry (a mapping with name and key or key_sha256) goes",
		}},
		{"duplicate field", "max_ttl: 60\nmax_ttl: 90\n", nil, []string{
			`line 2: mapping key "max_ttl" already defined at line 1`,
		}},
		{"duration without unit", "per_master_timeout: 50\n", nil, []string{
			`line 1: "50": no unit; write it with one, e.g. "50ms" or "50s"`,
		}},
		{"negative duration", "max_wait: -1s\n", nil, []string{`line 1: max_wait: "-1s": must not be negative`}},
		{"a list for one value", "max_ttl: [600]\n", nil, []string{"line 1: max_ttl: must be one value, not a list"}},
		{"a mapping for one value", "listen: {a: 1}\n", nil, []string{"line 1: listen: must be one value, not a mapping"}},
		{"one value for a list", "masters: 127.0.0.1:6379\n", nil, []string{"line 1: masters: must be a list (e.g. [127.0.0.1:6379]), not one value"}},
		{"every problem, one per line", "max_ttl: soon\nfoo: 1\nhealth_interval: 5\n", nil, []string{
			`line 1: max_ttl: "soon" is not a whole number`,
			`line 2: unknown field "foo"`,
			`line 3: "5": no unit; write it with one, e.g. "5ms" or "5s"`,
		}},
		// yaml.v3 alone truncates 1.5 into an int and names no field for a
		// quoted number.
		{"fractions and strings in whole-number settings", "extra_votes: 1.5\nmax_ttl: '600'\naccount_defaults:\n  max_locks: 2.9\n", nil, []string{
			`line 1: extra_votes: "1.5" is not a whole number`,
			`line 2: max_ttl: "600" is not a whole number`,
			`line 4: account_defaults.max_locks: "2.9" is not a whole number`,
		}},
		// An api_keys entry's limits are inline: they were truncated
		// without a word while account_defaults refused the same lines;
		// a quota's {calls, per} decodes itself and dropped unknown
		// fields ("pre: 2h" was then refused as a per of 0s) (a
		// black-box pass).
		{"fractions in an api_keys entry's limits", "api_keys:\n  - name: shop\n    max_locks: 12.9\n    burst: 20.7\n    quota: {calls: 60.5, per: 1h}\n    max_idempotency_bytes: 1000.5\n", nil, []string{
			`line 3: api_keys[0].max_locks: "12.9" is not a whole number`,
			`line 4: api_keys[0].burst: "20.7" is not a whole number`,
			`line 5: api_keys[0].quota.calls: "60.5" is not a whole number`,
			`line 6: api_keys[0].max_idempotency_bytes: "1000.5" is not a whole number`,
		}},
		{"unknown fields in a quota", "api_keys:\n  - name: shop\n    quota: {calls: 60, pre: 2h}\naccount_defaults:\n  quota: {calls: 60, per: 1h, bogus: true}\n", nil, []string{
			`line 3: quota: unknown field "pre"; a quota has calls and per`,
			`line 5: quota: unknown field "bogus"; a quota has calls and per`,
		}},
		{"unknown field of an api_keys entry's limits", "api_keys:\n  - name: shop\n    max_lock: 3\n", nil, []string{
			`line 3: unknown field "max_lock"; did you mean "max_locks"?`,
		}},
		{"second document", "listen: ':1'\n---\nlisten: ':2'\n", nil, []string{
			"line 2: a second YAML document; the file must hold one",
		}},
		{"syntax error", "listen: [\n", nil, []string{"line 1: did not find expected node content"}},
		{"not a mapping", "- a\n", nil, []string{"line 1: cannot unmarshal !!seq into the settings (a mapping of field: value)"}},
		// Never the value: it is a key.
		{"api keys as one value", "api_keys: \"" + secretKey + "\"\n", nil, []string{
			"line 1: api_keys: must be a list of {name, key} entries, not one value",
		}},
		{"api key of the wrong shape", "api_keys:\n  - name: shop\n    key: [" + secretKey + "]\n", nil, []string{
			"line 3: api_keys[0].key: must be one value, not a list",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, tt.yaml)
			got, err := config.LoadFile(path)
			assertNoSecrets(t, err)
			if tt.wantErr != nil {
				want := make([]string, len(tt.wantErr))
				for i, w := range tt.wantErr {
					want[i] = path + ": " + w
				}
				if lines := errorLines(err); !slices.Equal(lines, want) {
					t.Errorf("LoadFile error =\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadFile: %v", err)
			}
			want := config.DefaultConfig()
			tt.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("LoadFile =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestLoadFileMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := config.LoadFile(path)
	if err == nil || !strings.Contains(err.Error(), path) || !os.IsNotExist(err) {
		t.Errorf("LoadFile(missing) = %v, want a not-exist error naming the file", err)
	}
}

// TestExampleFile keeps redlockd.example.yaml honest: it loads, validates,
// and states every default exactly.
func TestExampleFile(t *testing.T) {
	got, err := config.LoadFile("redlockd.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("example does not validate:\n%v", err)
	}
	if len(got.Masters) != 5 || len(got.APIKeys) != 2 || got.APIKeys[1].KeySHA256 == "" {
		t.Errorf("example masters = %q, api_keys = %v; want 5 masters and a key and a key_sha256", got.Masters, got.APIKeys)
	}
	want := config.DefaultConfig()
	want.Masters, want.APIKeys = got.Masters, got.APIKeys // no defaults to compare with
	if !reflect.DeepEqual(got, want) {
		t.Errorf("example defaults differ from DefaultConfig:\n%+v\nwant\n%+v", got, want)
	}

	// Every field appears in the example, commented out or not.
	raw, err := os.ReadFile("redlockd.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	typ := reflect.TypeFor[config.Config]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("yaml"), ",")
		if !bytes.Contains(raw, []byte("\n"+name+":")) && !bytes.Contains(raw, []byte("\n# "+name+":")) {
			t.Errorf("example does not show field %s", name)
		}
	}
}

func TestApplyEnv(t *testing.T) {
	tests := []struct {
		name    string
		vars    map[string]string
		want    func(c *config.Config)
		wantErr []string
	}{
		{"nothing set", nil, func(c *config.Config) {}, nil},
		{"every variable", map[string]string{
			"REDLOCKD_LISTEN":                                 ":8080",
			"REDLOCKD_TLS_CERT_FILE":                          "s.crt",
			"REDLOCKD_TLS_KEY_FILE":                           "s.key",
			"REDLOCKD_TLS_CLIENT_CA_FILE":                     "clients.crt",
			"REDLOCKD_ADMIN_LISTEN":                           "127.0.0.1:8081",
			"REDLOCKD_ADMIN_TOKEN":                            secretKey2,
			"REDLOCKD_ADMIN_TOKEN_FILE":                       "token",
			"REDLOCKD_MASTERS":                                "a:1, b:2 ,c:3",
			"REDLOCKD_MASTER_USERNAME":                        "redlockd",
			"REDLOCKD_MASTER_PASSWORD":                        secretPassword,
			"REDLOCKD_MASTER_PASSWORD_FILE":                   "pw",
			"REDLOCKD_MASTER_TLS":                             "true",
			"REDLOCKD_MASTER_TLS_CA_FILE":                     "ca.crt",
			"REDLOCKD_MASTER_TLS_SERVER_NAME":                 "redis.internal",
			"REDLOCKD_MASTER_TLS_CERT_FILE":                   "c.crt",
			"REDLOCKD_MASTER_TLS_KEY_FILE":                    "c.key",
			"REDLOCKD_API_KEYS":                               "shop:" + secretKey + ",ops:" + secretKey2,
			"REDLOCKD_KEY_PREFIX":                             "rl:",
			"REDLOCKD_PER_MASTER_TIMEOUT":                     "20ms",
			"REDLOCKD_DRIFT_FACTOR":                           "0.02",
			"REDLOCKD_DEFAULT_TTL":                            "15",
			"REDLOCKD_MAX_TTL":                                "600",
			"REDLOCKD_MAX_WAIT":                               "0",
			"REDLOCKD_MAX_WAITERS":                            "50",
			"REDLOCKD_MAX_WAITERS_PER_ACCOUNT":                "5",
			"REDLOCKD_AUTH_FAILURES_PER_MINUTE":               "6",
			"REDLOCKD_AUTH_FAILURE_BURST":                     "7",
			"REDLOCKD_AUTH_FAILURE_SOURCES":                   "8",
			"REDLOCKD_MAX_BODY_BYTES":                         "2048",
			"REDLOCKD_HEALTH_INTERVAL":                        "500ms",
			"REDLOCKD_IDEMPOTENCY_MAX_RETENTION":              "24h",
			"REDLOCKD_IDEMPOTENCY_MAX_ANSWER_BYTES":           "4096",
			"REDLOCKD_DRAIN_DELAY":                            "5s",
			"REDLOCKD_SHUTDOWN_TIMEOUT":                       "3s",
			"REDLOCKD_ACCOUNT_DEFAULTS_QUOTA":                 "5000/1h",
			"REDLOCKD_ACCOUNT_DEFAULTS_RATE":                  "2.5",
			"REDLOCKD_ACCOUNT_DEFAULTS_BURST":                 "7",
			"REDLOCKD_ACCOUNT_DEFAULTS_MAX_LOCKS":             "40",
			"REDLOCKD_ACCOUNT_DEFAULTS_MAX_IDEMPOTENCY_BYTES": "1048576",
			"REDLOCKD_ACCOUNT_DEFAULTS_LOCK_DELAY":            "15s",
			"REDLOCKD_LIMITS_SYNC_INTERVAL":                   "250ms",
			"REDLOCKD_LOG_FORMAT":                             "console",
			"REDLOCKD_LOG_LEVEL":                              "debug",
		}, func(c *config.Config) {
			*c = config.Config{
				Listen:                    ":8080",
				TLSCertFile:               "s.crt",
				TLSKeyFile:                "s.key",
				TLSClientCAFile:           "clients.crt",
				AdminListen:               "127.0.0.1:8081",
				AdminToken:                secretKey2,
				AdminTokenFile:            "token",
				Masters:                   []string{"a:1", "b:2", "c:3"},
				MasterUsername:            "redlockd",
				MasterPassword:            secretPassword,
				MasterPasswordFile:        "pw",
				MasterTLS:                 true,
				MasterTLSCAFile:           "ca.crt",
				MasterTLSServerName:       "redis.internal",
				MasterTLSCertFile:         "c.crt",
				MasterTLSKeyFile:          "c.key",
				APIKeys:                   []config.APIKey{{Name: "shop", Key: secretKey}, {Name: "ops", Key: secretKey2}},
				KeyPrefix:                 "rl:",
				PerMasterTimeout:          config.Duration(20 * time.Millisecond),
				DriftFactor:               0.02,
				DefaultTTL:                15,
				MaxTTL:                    600,
				MaxWait:                   0,
				MaxWaiters:                50,
				MaxWaitersPerAccount:      5,
				AuthFailuresPerMinute:     6,
				AuthFailureBurst:          7,
				AuthFailureSources:        8,
				MaxBodyBytes:              2048,
				HealthInterval:            config.Duration(500 * time.Millisecond),
				IdempotencyMaxRetention:   config.Duration(24 * time.Hour),
				IdempotencyMaxAnswerBytes: 4096,
				DrainDelay:                config.Duration(5 * time.Second),
				ShutdownTimeout:           config.Duration(3 * time.Second),
				AccountDefaults: config.Limits{
					Quota: &config.Quota{Calls: 5000, Per: config.Duration(time.Hour)},
					Rate:  ptr(2.5), Burst: ptr(7), MaxLocks: ptr(40), MaxIdempotencyBytes: ptr(1 << 20),
					LockDelay: ptr(config.Duration(15 * time.Second)),
				},
				LimitsSyncInterval: config.Duration(250 * time.Millisecond),
				LogFormat:          "console",
				LogLevel:           "debug",
			}
		}, nil},
		{"a key may contain a colon", map[string]string{"REDLOCKD_API_KEYS": "shop:" + secretKey + ":x"}, func(c *config.Config) {
			c.APIKeys = []config.APIKey{{Name: "shop", Key: secretKey + ":x"}}
		}, nil},
		{"empty counts as set", map[string]string{"REDLOCKD_MASTER_USERNAME": "", "REDLOCKD_MASTERS": ""}, func(c *config.Config) {}, nil},
		// Empty, a protection's variable would turn it off silently (a
		// black-box pass: REDLOCKD_ADMIN_TOKEN_FILE= opened /admin/* to
		// anyone, REDLOCKD_TLS_CERT_FILE= served plain HTTP).
		{"an empty protection is refused", map[string]string{
			"REDLOCKD_ADMIN_TOKEN_FILE": "",
			"REDLOCKD_TLS_CERT_FILE":    "",
			"REDLOCKD_MASTER_PASSWORD":  "",
		}, nil, []string{
			"REDLOCKD_TLS_CERT_FILE: set but empty, which would turn tls_cert_file off; unset the variable to keep the configured value",
			"REDLOCKD_ADMIN_TOKEN_FILE: set but empty, which would turn admin_token_file off; unset the variable to keep the configured value",
			"REDLOCKD_MASTER_PASSWORD: set but empty, which would turn master_password off; unset the variable to keep the configured value",
		}},
		{"bad values, each named, all reported", map[string]string{
			"REDLOCKD_MAX_TTL":            "1d",
			"REDLOCKD_PER_MASTER_TIMEOUT": "50",
			"REDLOCKD_DRIFT_FACTOR":       "1%",
			"REDLOCKD_MAX_BODY_BYTES":     "16k",
			"REDLOCKD_MASTERS":            "a:1,,c:3",
			"REDLOCKD_MASTER_TLS":         "yes please",
		}, nil, []string{
			`REDLOCKD_MASTERS: "a:1,,c:3": entry 2 is empty`,
			`REDLOCKD_MASTER_TLS: "yes please": want true or false`,
			`REDLOCKD_PER_MASTER_TIMEOUT: "50": no unit; write it with one, e.g. "50ms" or "50s"`,
			`REDLOCKD_DRIFT_FACTOR: "1%": want a number such as 0.01`,
			`REDLOCKD_MAX_TTL: "1d": want a whole number`,
			`REDLOCKD_MAX_BODY_BYTES: "16k": want a whole number`,
		}},
		{"bad API keys are not echoed", map[string]string{"REDLOCKD_API_KEYS": "shop:" + secretKey + "," + secretKey2}, nil, []string{
			"REDLOCKD_API_KEYS: entry 2: want name:key",
		}},
		{"API key without a name", map[string]string{"REDLOCKD_API_KEYS": ":" + secretKey}, nil, []string{
			"REDLOCKD_API_KEYS: entry 1: want name:key",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := config.DefaultConfig()
			err := got.ApplyEnv(env(tt.vars))
			assertNoSecrets(t, err)
			if tt.wantErr != nil {
				if lines := errorLines(err); !slices.Equal(lines, tt.wantErr) {
					t.Errorf("ApplyEnv error =\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(tt.wantErr, "\n"))
				}
				return
			}
			if err != nil {
				t.Fatalf("ApplyEnv: %v", err)
			}
			want := config.DefaultConfig()
			tt.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("ApplyEnv =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestApplyFlags(t *testing.T) {
	fs := parsedFlags(t,
		"--listen=:8080", "--masters", "a:1,b:2,c:3", "--per-master-timeout=20ms", "--drift-factor=0.02",
		"--default-ttl=15", "--max-ttl=600", "--max-wait=1m", "--log-format=console", "--log-level=warn",
		"--key-prefix=rl:", "--health-interval=2s", "--shutdown-timeout=3s", "--max-body-bytes=2048",
		"--auth-failures-per-minute=6", "--auth-failure-burst=7", "--auth-failure-sources=8")
	got := config.DefaultConfig()
	if err := got.ApplyFlags(fs); err != nil {
		t.Fatal(err)
	}
	want := config.DefaultConfig()
	want.Listen = ":8080"
	want.Masters = []string{"a:1", "b:2", "c:3"}
	want.PerMasterTimeout = config.Duration(20 * time.Millisecond)
	want.DriftFactor = 0.02
	want.DefaultTTL = 15
	want.MaxTTL = 600
	want.MaxWait = config.Duration(time.Minute)
	want.LogFormat = "console"
	want.LogLevel = "warn"
	want.KeyPrefix = "rl:"
	want.HealthInterval = config.Duration(2 * time.Second)
	want.ShutdownTimeout = config.Duration(3 * time.Second)
	want.MaxBodyBytes = 2048
	want.AuthFailuresPerMinute, want.AuthFailureBurst, want.AuthFailureSources = 6, 7, 8
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ApplyFlags =\n%+v\nwant\n%+v", got, want)
	}
}

func TestFlagErrors(t *testing.T) {
	tests := []struct{ arg, want string }{
		{"--per-master-timeout=50", `invalid value "50" for flag -per-master-timeout: no unit; write it with one, e.g. "50ms" or "50s"`},
		{"--max-wait=-1s", `invalid value "-1s" for flag -max-wait: negative durations are not allowed`},
		{"--max-ttl=1h", `invalid value "1h" for flag -max-ttl: want a whole number`},
		{"--drift-factor=x", `invalid value "x" for flag -drift-factor: want a number such as 0.01`},
		{"--api-keys=shop:" + secretKey, "flag provided but not defined: -api-keys"},
		// Empty, a flag would turn the file's protection off.
		{"--admin-token-file=", `invalid value "" for flag -admin-token-file: empty, which would turn admin_token_file off; leave the flag out to keep the configured value`},
		{"--tls-client-ca-file=", `invalid value "" for flag -tls-client-ca-file: empty, which would turn tls_client_ca_file off; leave the flag out to keep the configured value`},
		{"--master-password-file=", `invalid value "" for flag -master-password-file: empty, which would turn master_password_file off; leave the flag out to keep the configured value`},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("redlockd", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		new(config.Config).RegisterFlags(fs)
		err := fs.Parse([]string{tt.arg})
		if err == nil || err.Error() != tt.want {
			t.Errorf("Parse(%q) = %v, want %q", tt.arg, err, tt.want)
		}
	}

	var c config.Config
	if err := c.ApplyFlags(flag.NewFlagSet("x", flag.ContinueOnError)); err == nil {
		t.Error("ApplyFlags accepted a flag set that was never parsed")
	}
}

func TestFlagHelpStatesDefaults(t *testing.T) {
	fs := flag.NewFlagSet("redlockd", flag.ContinueOnError)
	var c config.Config // a zero receiver: the help still shows DefaultConfig
	c.RegisterFlags(fs)
	var help bytes.Buffer
	fs.SetOutput(&help)
	fs.PrintDefaults()
	for _, want := range []string{
		"-listen host:port", "(default 127.0.0.1:7070)",
		"-masters list", "(no default)",
		"-per-master-timeout duration", "(default 50ms)",
		"-drift-factor factor", "(default 0.01)",
		"-default-ttl seconds", "(default 30)",
		"-max-ttl seconds", "(default 86400)",
		"-max-wait duration", "(default 30s)",
		"-max-body-bytes bytes", "(default 16384)",
		"-health-interval duration", "(default 1s)",
		"-shutdown-timeout duration", "(default 10s)",
		"-log-format format", "(default json)",
		"-log-level level", "(default info)",
		"-key-prefix prefix", "(default redlock:)",
		"env REDLOCKD_PER_MASTER_TIMEOUT",
	} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("flag help lacks %q:\n%s", want, help.String())
		}
	}
	for _, secret := range []string{"api-keys", "master-password"} {
		if fs.Lookup(secret) != nil {
			t.Errorf("secret %s is a flag; argv is visible to every local user", secret)
		}
	}
}

// TestLoadPrecedence checks defaults < file < env < flags, and that a flag
// or variable left out never overrides with its default.
func TestLoadPrecedence(t *testing.T) {
	path := writeFile(t, validYAML+`
listen: "127.0.0.1:1111"
max_ttl: 100
log_level: debug
max_wait: 5s
`)
	lookup := env(map[string]string{
		"REDLOCKD_LISTEN":  "127.0.0.1:2222",
		"REDLOCKD_MAX_TTL": "200",
	})
	fs := parsedFlags(t, "--listen", "127.0.0.1:3333")

	got, err := config.Load(path, lookup, fs)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		field     string
		got, want any
	}{
		{"listen (flag over env over file)", got.Listen, "127.0.0.1:3333"},
		{"max_ttl (env over file)", got.MaxTTL, 200},
		{"log_level (file over default)", got.LogLevel, "debug"},
		{"max_wait (file; flag not given)", got.MaxWait, config.Duration(5 * time.Second)},
		{"drift_factor (default)", got.DriftFactor, 0.01},
		{"master_password (file)", got.MasterPassword, secretPassword},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.field, c.got, c.want)
		}
	}
}

func TestLoad(t *testing.T) {
	t.Run("no file: env and flags alone", func(t *testing.T) {
		lookup := env(map[string]string{
			"REDLOCKD_MASTERS":  "a:1,b:2,c:3",
			"REDLOCKD_API_KEYS": "shop:" + secretKey,
		})
		got, err := config.Load("", lookup, parsedFlags(t))
		if err != nil || len(got.Masters) != 3 || len(got.APIKeys) != 1 {
			t.Errorf("Load = %+v, %v", got, err)
		}
	})
	t.Run("nil lookup and flag set", func(t *testing.T) {
		if _, err := config.Load(writeFile(t, validYAML), nil, nil); err != nil {
			t.Error(err)
		}
	})
	t.Run("validates the result", func(t *testing.T) {
		path := writeFile(t, validYAML+"max_ttl: 100000\n")
		_, err := config.Load(path, env(map[string]string{"REDLOCKD_MASTERS": "a:1,b:2"}), parsedFlags(t))
		want := []string{"masters: 2 given, need an odd number ≥ 3", "max_ttl: 100000 is above the limit of 86400"}
		if lines := errorLines(err); !slices.Equal(lines, want) {
			t.Errorf("Load error = %q, want %q", lines, want)
		}
	})
	t.Run("file errors stop the chain", func(t *testing.T) {
		path := writeFile(t, "bogus: 1\n")
		_, err := config.Load(path, nil, nil)
		if want := path + `: line 1: unknown field "bogus"`; err == nil || err.Error() != want {
			t.Errorf("Load error = %v, want %q", err, want)
		}
	})
	t.Run("env errors stop the chain", func(t *testing.T) {
		_, err := config.Load(writeFile(t, validYAML), env(map[string]string{"REDLOCKD_MAX_TTL": "x"}), nil)
		if want := `REDLOCKD_MAX_TTL: "x": want a whole number`; err == nil || err.Error() != want {
			t.Errorf("Load error = %v, want %q", err, want)
		}
	})
}

func ptr[T any](v T) *T { return &v }

func TestLoadFileLimits(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := config.LoadFile(write(`
account_defaults:
  quota: {calls: 1000, per: 24h}
  rate: 20
  lock_delay: 15s
api_keys:
  - name: a
    key_sha256: "` + strings.Repeat("a", 64) + `"
    quota: unlimited
    burst: 50
    max_locks: 3
  - name: b
    key_sha256: "` + strings.Repeat("b", 64) + `"
    lock_delay: 0s
`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.AccountLimits(c.APIKeys[0]), (config.AccountLimits{Rate: 20, Burst: 50, MaxLocks: 3, MaxIdempotencyBytes: config.DefaultMaxIdempotencyBytes, LockDelay: 15 * time.Second}); got != want {
		t.Errorf("limits %+v, want %+v", got, want)
	}
	if got := c.AccountLimits(c.APIKeys[1]).LockDelay; got != 0 {
		t.Errorf("lock_delay: 0s on the entry: %v, want 0 (none)", got)
	}
	if got := c.AccountDefaults.Quota; got == nil || *got != (config.Quota{Calls: 1000, Per: config.Duration(24 * time.Hour)}) {
		t.Errorf("default quota %+v", got)
	}
	_, err = config.LoadFile(write("account_defaults:\n  quota: 1000\n"))
	if err == nil || !strings.Contains(err.Error(), `line 2: quota: want {calls: 100000, per: 24h} or "unlimited"`) {
		t.Errorf("a bare number as quota: %v", err)
	}
	_, err = config.LoadFile(write("account_defaults:\n  quota: {calls: 10, per: 10}\n"))
	if err == nil || !strings.Contains(err.Error(), `no unit`) {
		t.Errorf("a window without a unit: %v", err)
	}
}

func TestUnknownEnv(t *testing.T) {
	got := config.UnknownEnv([]string{
		"REDLOCKD_MAX_TTL=600",       // a setting
		"REDLOCKD_URL=http://x",      // the lock commands' daemon
		"REDLOCKD_MAXTTL=600",        // misspelt
		"REDLOCKD_SOMETHING=else",    // nothing near
		"PATH=/bin",                  // not ours
		"REDLOCKD_API_KEYS=shop:x=y", // a setting, its value holds '='
		"REDLOCKD_PER_MASTER_TIMEOUTS=50ms",
	})
	want := []string{
		"REDLOCKD_MAXTTL (did you mean REDLOCKD_MAX_TTL?)",
		"REDLOCKD_SOMETHING",
		"REDLOCKD_PER_MASTER_TIMEOUTS (did you mean REDLOCKD_PER_MASTER_TIMEOUT?)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("UnknownEnv =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSecretOverridesItsFileFromBelow: the environment (or a flag) that
// sets a secret or its *_file overrides the other one from the layer
// below, as every setting overrides the file; set both in one layer and it
// is still "not both". A black-box pass got "set master_password or
// master_password_file, not both" for REDLOCKD_MASTER_PASSWORD over a
// file's master_password_file.
func TestSecretOverridesItsFileFromBelow(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	require.NoError(t, os.WriteFile(pwFile, []byte("from-the-file-0123456789\n"), 0o600))

	t.Run("env password over the file's password_file", func(t *testing.T) {
		path := writeFile(t, `
masters: ["127.0.0.1:6379", "127.0.0.1:6380", "127.0.0.1:6381"]
master_password_file: `+pwFile+`
api_keys:
  - name: shop
    key: `+secretKey+`
`)
		got, err := config.Load(path, env(map[string]string{"REDLOCKD_MASTER_PASSWORD": secretPassword}), parsedFlags(t))
		require.NoError(t, err)
		assert.Equal(t, secretPassword, got.MasterPassword)
		assert.Empty(t, got.MasterPasswordFile)
	})
	t.Run("env password_file over the file's password", func(t *testing.T) {
		got, err := config.Load(writeFile(t, validYAML), env(map[string]string{"REDLOCKD_MASTER_PASSWORD_FILE": pwFile}), parsedFlags(t))
		require.NoError(t, err)
		assert.Equal(t, "from-the-file-0123456789", got.MasterPassword)
	})
	t.Run("flag password_file over the env's password", func(t *testing.T) {
		got, err := config.Load(writeFile(t, validYAML), env(map[string]string{"REDLOCKD_MASTER_PASSWORD": secretPassword}), parsedFlags(t, "--master-password-file", pwFile))
		require.NoError(t, err)
		assert.Equal(t, "from-the-file-0123456789", got.MasterPassword)
	})
	t.Run("both in one layer", func(t *testing.T) {
		_, err := config.Load(writeFile(t, validYAML), env(map[string]string{"REDLOCKD_MASTER_PASSWORD": secretPassword, "REDLOCKD_MASTER_PASSWORD_FILE": pwFile}), parsedFlags(t))
		require.ErrorContains(t, err, "set master_password or master_password_file, not both")
	})
}

// TestMistaggedValueNamesTheFieldNotTheValue: a value whose explicit YAML
// tag it does not match made the decoder say "cannot decode !!str
// `<value>` as a !!int", with no field or line: for an API key, the admin
// token or a master password, the secret went to the terminal, the log
// and a reload's answer (a black-box pass). Now the error names the line
// and the field and never the value; a tag the value matches still loads.
func TestMistaggedValueNamesTheFieldNotTheValue(t *testing.T) {
	const secret = "SUPERSECRETAPIKEY-9999"
	for _, tc := range []struct{ yaml, want string }{
		{"api_keys: [{name: t, key: !!int \"" + secret + "\"}]\n", "line 1: api_keys[0].key: the value is not a !!int"},
		{"listen: \"127.0.0.1:7070\"\nadmin_token: !!float " + secret + "\n", "line 2: admin_token: the value is not a !!float"},
		{"master_password: !!bool \"" + secret + "\"\n", "line 1: master_password: the value is not a !!bool"},
	} {
		_, err := config.LoadFile(writeFile(t, tc.yaml))
		require.Error(t, err, tc.yaml)
		assert.Contains(t, err.Error(), tc.want)
		assert.NotContains(t, err.Error(), secret)
	}
	c, err := config.LoadFile(writeFile(t, "api_keys: [{name: t, key: !!str "+secret+"}]\nmax_ttl: !!int 600\n"))
	require.NoError(t, err, "tags the values match")
	assert.Equal(t, secret, c.APIKeys[0].Key)
}
