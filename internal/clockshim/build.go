package clockshim

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrNoCompiler is returned, wrapped, by Build when no C compiler is found.
var ErrNoCompiler = errors.New(`clockshim: no C compiler found ($CC, gcc or cc on PATH); install one with "apt-get install gcc"`)

//go:embed csrc/shim.c
var shimSource []byte

// compileArgs are the compiler flags; the source is read from stdin.
var compileArgs = []string{"-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-x", "c", "-", "-x", "none", "-ldl"}

// Build compiles the shim with the C compiler ($CC if set, else gcc, else cc)
// into dir and returns the path of the shared object. The file name carries
// a hash of the source, the compiler path and the flags, so a build is
// reused until one of them changes, and concurrent Builds (parallel test
// packages) are safe: each compiles to a temp file and renames it into
// place. An empty dir means a "redlockd-clockshim" directory under
// os.TempDir. If no compiler is found the error wraps ErrNoCompiler; a
// failed compile returns the compiler's output.
func Build(dir string) (string, error) {
	cc, err := findCompiler()
	if err != nil {
		return "", err
	}
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "redlockd-clockshim")
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return "", fmt.Errorf("clockshim: build dir: %w", err)
	}
	h := sha256.New()
	h.Write(shimSource)
	fmt.Fprintf(h, "\x00%s\x00%s", cc, strings.Join(compileArgs, "\x00"))
	name := "clockshim-" + hex.EncodeToString(h.Sum(nil))[:16] + ".so"
	out := filepath.Join(dir, name)
	if fi, err := os.Stat(out); err == nil && fi.Mode().IsRegular() {
		return out, nil
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("clockshim: build dir: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+name+".tmp*")
	if err != nil {
		return "", fmt.Errorf("clockshim: build: %w", err)
	}
	tmpPath := tmp.Name()
	tmp.Close()
	defer os.Remove(tmpPath) // a no-op once renamed

	args := append([]string{"-o", tmpPath}, compileArgs...)
	cmd := exec.Command(cc, args...)
	cmd.Stdin = bytes.NewReader(shimSource)
	if output, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("clockshim: %s %s: %w\n%s", cc, strings.Join(args, " "), err, bytes.TrimSpace(output))
	}
	if err := os.Chmod(tmpPath, 0o755); err != nil {
		return "", fmt.Errorf("clockshim: build: %w", err)
	}
	if err := os.Rename(tmpPath, out); err != nil {
		return "", fmt.Errorf("clockshim: build: %w", err)
	}
	return out, nil
}

// findCompiler returns the path of $CC (a bare command name or path, no
// flags), else of gcc, else of cc.
func findCompiler() (string, error) {
	var tried []string
	names := []string{"gcc", "cc"}
	if cc := strings.TrimSpace(os.Getenv("CC")); cc != "" && !strings.ContainsAny(cc, " \t") {
		names = append([]string{cc}, names...)
	}
	for _, name := range names {
		if path, err := exec.LookPath(name); err == nil {
			return path, nil
		}
		tried = append(tried, name)
	}
	return "", fmt.Errorf("%w (tried %s)", ErrNoCompiler, strings.Join(tried, ", "))
}
