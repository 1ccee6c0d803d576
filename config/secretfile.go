package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// maxSecretFileBytes bounds a *_file secret: a password or token, not a
// file given by mistake.
const maxSecretFileBytes = 4096

// secretFile is a secret field and the *_file field that may hold it.
type secretFile struct {
	name, fileName string
	value          func(c *Config) *string
	file           func(c *Config) *string
}

var secretFiles = []secretFile{
	{"master_password", "master_password_file", func(c *Config) *string { return &c.MasterPassword }, func(c *Config) *string { return &c.MasterPasswordFile }},
	{"admin_token", "admin_token_file", func(c *Config) *string { return &c.AdminToken }, func(c *Config) *string { return &c.AdminTokenFile }},
}

// ReadSecretFiles reads every *_file field that is set into its secret
// field (master_password_file into MasterPassword, admin_token_file into
// AdminToken), so that secrets can stay out
// of the YAML file and the environment. The file holds the secret alone;
// one final newline (LF or CRLF) is dropped. Setting both a secret and its
// file is an error, as is an empty or unreadable file; errors name the
// field and the file, never the content. Load calls it after the flags and
// before Validate.
func (c *Config) ReadSecretFiles() error {
	var errs []error
	for _, sf := range secretFiles {
		path := *sf.file(c)
		if path == "" {
			continue
		}
		if *sf.value(c) != "" {
			errs = append(errs, &FieldError{Field: sf.fileName, Problem: "set " + sf.name + " or " + sf.fileName + ", not both"})
			continue
		}
		v, err := readSecretFile(path)
		if err != nil {
			errs = append(errs, &FieldError{Field: sf.fileName, Problem: err.Error()})
			continue
		}
		*sf.value(c) = v
	}
	return errors.Join(errs...)
}

func readSecretFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err // an *fs.PathError names the file
	}
	defer f.Close()
	buf, err := io.ReadAll(io.LimitReader(f, maxSecretFileBytes+1))
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if len(buf) > maxSecretFileBytes {
		return "", fmt.Errorf("%s: larger than %d bytes; it must hold the secret alone", path, maxSecretFileBytes)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(buf), "\n"), "\r")
	if s == "" {
		return "", fmt.Errorf("%s: empty", path)
	}
	return s, nil
}
