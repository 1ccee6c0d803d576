package config

import (
	"errors"
	"flag"
	"fmt"
	"slices"
)

// RegisterFlags adds to fs one flag per setting that may be given on the
// command line: --listen, --tls-cert-file, --tls-key-file,
// --tls-client-ca-file, --admin-listen, --admin-token-file, --masters
// (comma-separated), --master-username, --master-password-file,
// --master-tls, --master-tls-ca-file, --master-tls-server-name,
// --master-tls-cert-file, --master-tls-key-file, --key-prefix,
// --per-master-timeout, --drift-factor, --default-ttl, --max-ttl,
// --max-wait, --max-body-bytes, --health-interval, --drain-delay,
// --shutdown-timeout, --account-defaults-quota, --account-defaults-rate,
// --account-defaults-burst, --account-defaults-max-locks,
// --account-defaults-lock-delay, --limits-sync-interval, --log-format and --log-level. API keys, the
// master password and the admin token have no flag, since any local user
// can read a process's arguments; their *_file variants do.
//
// The help texts show DefaultConfig's values as the defaults. Parsed values
// stay in fs; c is neither read nor changed. Call [Config.ApplyFlags] after
// fs.Parse to copy the flags that were given into a Config: a flag left out
// does not override the file or the environment with its default.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.RegisterFlagsFor(fs)
}

// RegisterFlagsFor is RegisterFlags for the named settings only (YAML
// names: "masters", "key_prefix"), for a command that uses only those.
// With no names it registers every flag.
func (c *Config) RegisterFlagsFor(fs *flag.FlagSet, names ...string) {
	def := DefaultConfig()
	for i := range settings {
		s := &settings[i]
		if !s.flag || (len(names) > 0 && !slices.Contains(names, s.name)) {
			continue
		}
		fs.Var(&flagValue{s: s, value: s.get(&def)}, s.flagName(),
			fmt.Sprintf("%s; env %s", s.usage, s.envName()))
	}
}

// ApplyFlags copies into c the flags registered by RegisterFlags that were
// set on the command line. fs must have been parsed. Flags that are not
// ours are ignored, so fs may carry others.
func (c *Config) ApplyFlags(fs *flag.FlagSet) error {
	if !fs.Parsed() {
		return errors.New("config: ApplyFlags called before the flag set was parsed")
	}
	var errs []error
	applied := map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		v, ok := f.Value.(*flagValue)
		if !ok || v.s == nil {
			return
		}
		applied[v.s.name] = true
		// Set already parsed the value once, so this fails only if the
		// flag set was changed by hand.
		if err := v.s.set(c, v.value); err != nil {
			errs = append(errs, fmt.Errorf("--%s: %q: %w", f.Name, v.value, err))
		}
	})
	c.overrideSecretPairs(applied)
	return errors.Join(errs...)
}

// flagValue holds a flag's text until ApplyFlags copies it into a Config.
type flagValue struct {
	s     *setting
	value string
}

func (f *flagValue) String() string {
	if f == nil {
		return ""
	}
	return f.value
}

// IsBoolFlag lets a boolean setting's flag be given alone (--master-tls).
func (f *flagValue) IsBoolFlag() bool { return f.s != nil && f.s.boolean }

// Set checks s by applying it to a scratch Config, so that a bad value
// fails in fs.Parse with the flag package's usual message.
func (f *flagValue) Set(s string) error {
	if s == "" && protects[f.s.name] {
		// As an empty REDLOCKD_* variable (ApplyEnv): given empty, the
		// flag would turn the file's protection off without a word (a
		// black-box pass: --admin-token-file= served /admin/reload to
		// anyone, --tls-client-ca-file= dropped client certificates).
		return fmt.Errorf("empty, which would turn %s off; leave the flag out to keep the configured value", f.s.name)
	}
	var scratch Config
	if err := f.s.set(&scratch, s); err != nil {
		return err
	}
	f.value = s
	return nil
}
