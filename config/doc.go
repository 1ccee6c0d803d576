// Package config loads, defaults and validates the settings of the redlockd
// daemon.
//
// A Config starts from [DefaultConfig]. Settings then come from three places,
// each overriding the one before:
//
//  1. a YAML file ([LoadFile]); strict: an unknown field, a second document or
//     a duration without a unit is an error naming the line;
//  2. REDLOCKD_* environment variables ([Config.ApplyEnv]);
//  3. command-line flags ([Config.RegisterFlags], [Config.ApplyFlags]); only
//     flags given on the command line override, so a flag's default never
//     hides a value from the file or the environment.
//
// Secrets may instead be read from files named by *_file settings
// (master_password_file, admin_token_file; [Config.ReadSecretFiles]), so
// that they stay out of the YAML file and the environment.
//
// [Load] runs that chain and then [Config.Validate], which reports every
// problem at once (joined with errors.Join), each as a [*FieldError] naming
// the field by its YAML path: `masters[2]: "127.0.0.1": missing port`.
//
// What this package guarantees and what it does not:
//
//   - Error messages never contain an API key, a key_sha256 value, the master
//     password, the admin token, the content of a *_file secret or an API
//     key's name (a misplaced key is easily pasted into
//     the name field). Master addresses that look like URLs are not echoed
//     either, since a URL can carry a password. Config and APIKey implement
//     fmt.Stringer with secrets masked, but a Config handed to a reflection
//     based encoder (JSON, zap.Any) is printed as it is.
//   - LoadFile, ApplyEnv and ApplyFlags do not validate: a value given in the
//     file may still be completed or corrected by the environment or a flag.
//     Call Validate (or use Load) before using a Config.
//   - Validate checks shapes and ranges only; it does not resolve host names
//     or connect to the masters, so two names for the same Redis are not
//     caught as duplicates.
//
// redlockd.example.yaml in this directory lists every field with its default.
package config
