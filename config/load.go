package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// LoadFile reads the YAML file at path over DefaultConfig: fields the file
// leaves out, or leaves empty, keep their defaults; lists in the file
// replace the default lists. Decoding is strict: an unknown field, a value
// of the wrong type, a duration without a unit or a second YAML document is
// an error giving the line. An empty file yields DefaultConfig.
//
// Every error starts with path ("redlockd.yaml: line 3: ..."); one per
// problem, joined. LoadFile does not validate; see Load and Validate.
func LoadFile(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err // an *fs.PathError, which names the file
	}
	c := DefaultConfig()
	if err := decodeStrict(data, &c); err != nil {
		return Config{}, prefixErrors(path, err)
	}
	return c, nil
}

func decodeStrict(data []byte, c *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // empty file, or comments only
		}
		return err
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return err
	default:
		return fmt.Errorf("line %d: a second YAML document; the file must hold one", extra.Line)
	}
}

// prefixErrors puts path in front of each problem, drops yaml's own
// "yaml: " and "unmarshal errors:" headings, which add nothing once the
// file is named, and says each problem in the file's terms (friendlyYAML).
func prefixErrors(path string, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("%s: %s", path, friendlyYAML(strings.TrimPrefix(err.Error(), "yaml: ")))
	}
	errs := make([]error, len(te.Errors))
	for i, msg := range te.Errors {
		errs[i] = fmt.Errorf("%s: %s", path, friendlyYAML(msg))
	}
	return errors.Join(errs...)
}

// Load builds the daemon's Config: DefaultConfig, then the file at path
// (skipped when path is ""), then the environment through lookup (skipped
// when nil; normally os.LookupEnv), then the flags set in fs (skipped when
// nil; fs must have been parsed, with flags from RegisterFlags), then the
// secrets in *_file fields ([Config.ReadSecretFiles]), and finally
// Validate. It stops at the first stage that fails and returns that
// stage's errors, all of them, joined.
func Load(path string, lookup func(string) (string, bool), fs *flag.FlagSet) (Config, error) {
	return LoadFor(path, lookup, fs)
}

// LoadFor is Load for a command that uses only some settings: it validates
// only the named YAML fields (see [Config.ValidateFields]), so that, for
// example, an admin command that never serves the API does not ask for
// api_keys. With no names it validates every field, as Load does.
func LoadFor(path string, lookup func(string) (string, bool), fs *flag.FlagSet, fields ...string) (Config, error) {
	c := DefaultConfig()
	if path != "" {
		var err error
		if c, err = LoadFile(path); err != nil {
			return Config{}, err
		}
	}
	if lookup != nil {
		if err := c.ApplyEnv(lookup); err != nil {
			return Config{}, err
		}
	}
	if fs != nil {
		if err := c.ApplyFlags(fs); err != nil {
			return Config{}, err
		}
	}
	if err := c.ReadSecretFiles(); err != nil {
		return Config{}, err
	}
	if err := c.ValidateFields(fields...); err != nil {
		return Config{}, err
	}
	return c, nil
}
