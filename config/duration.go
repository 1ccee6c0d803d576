package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration written, in YAML, environment variables and
// flags alike, as a Go duration string with a unit: "50ms", "1s", "2m30s".
// A bare number is rejected, because 50 could mean milliseconds or seconds;
// the one exception is 0, which means the same in every unit. Negative
// durations are rejected too.
type Duration time.Duration

// String formats d like time.Duration does ("50ms", "1m0s"), which
// parses back to d.
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML reads a duration string. Problems come back as a
// *yaml.TypeError giving the line, so that the decoder reports them together
// with its own.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{
			fmt.Sprintf(`line %d: want a duration such as "50ms" or "1s"`, n.Line),
		}}
	}
	v, err := parseDuration(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{
			fmt.Sprintf("line %d: %q: %v", n.Line, n.Value, err),
		}}
	}
	*d = v
	return nil
}

// MarshalYAML writes d as its String form.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// MarshalText writes d as its String form, so JSON shows "50ms" rather
// than nanoseconds.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads a duration string under the same rules as YAML.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := parseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q: %w", b, err)
	}
	*d = v
	return nil
}

// parseDuration parses s under Duration's rules. Its errors do not repeat s;
// callers add it where it is safe to show.
func parseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	if s == "0" {
		return 0, nil
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return 0, fmt.Errorf("no unit; write it with one, e.g. %q or %q", s+"ms", s+"s")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New(`not a duration; write e.g. "50ms", "1s" or "2m30s"`)
	}
	if v < 0 {
		return 0, errors.New("negative durations are not allowed")
	}
	return Duration(v), nil
}
