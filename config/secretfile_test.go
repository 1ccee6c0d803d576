package config_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/redlockd/redlockd/config"
)

// *_file fields are read into their secrets; errors name the field and the
// file, never the content.
func TestReadSecretFiles(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok := file("token", secretKey2+"\r\n")
	empty := file("empty", "\n")
	big := file("big", strings.Repeat(secretKey2, 300))
	missing := filepath.Join(dir, "missing")

	c := validConfig()
	c.AdminListen, c.AdminTokenFile = "127.0.0.1:7071", ok
	if err := c.ReadSecretFiles(); err != nil {
		t.Fatal(err)
	}
	if c.AdminToken != secretKey2 {
		t.Errorf("AdminToken = %q, want the file's line without its newline", c.AdminToken)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate after ReadSecretFiles: %v", err)
	}

	for _, tc := range []struct {
		name  string
		token string
		file  string
		want  string
	}{
		{"both", secretKey, ok, "admin_token_file: set admin_token or admin_token_file, not both"},
		{"empty", "", empty, "admin_token_file: " + empty + ": empty"},
		{"too big", "", big, "admin_token_file: " + big + ": larger than 4096 bytes; it must hold the secret alone"},
		{"missing", "", missing, "admin_token_file: open " + missing + ": no such file or directory"},
	} {
		c := validConfig()
		c.AdminToken, c.AdminTokenFile = tc.token, tc.file
		err := c.ReadSecretFiles()
		if got := errorLines(err); !slices.Equal(got, []string{tc.want}) {
			t.Errorf("%s: ReadSecretFiles() = %v, want %q", tc.name, err, tc.want)
		}
		assertNoSecrets(t, err)
	}

	// master_password_file, and a flag --master-tls given alone.
	pw := file("master-password", secretPassword+"\n")
	path0 := writeFile(t, strings.Replace(validYAML, "master_password: "+secretPassword, "master_password_file: "+pw, 1))
	fs := parsedFlags(t, "--master-tls", "--master-username=redlockd")
	got0, err := config.Load(path0, nil, fs)
	if err != nil {
		t.Fatal(err)
	}
	if got0.MasterPassword != secretPassword || !got0.MasterTLS || got0.MasterUsername != "redlockd" {
		t.Errorf("Load: password from file %v, master_tls %v, username %q", got0.MasterPassword == secretPassword, got0.MasterTLS, got0.MasterUsername)
	}

	// Load reads the files before it validates.
	path := writeFile(t, validYAML+"admin_listen: 127.0.0.1:7071\nadmin_token_file: "+ok+"\n")
	got, err := config.Load(path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.AdminToken != secretKey2 {
		t.Errorf("Load: AdminToken not read from admin_token_file")
	}
	if strings.Contains(got.String(), secretKey2) {
		t.Errorf("Config.String() shows the admin token:\n%s", got)
	}
}
