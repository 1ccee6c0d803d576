package main

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/certgen"
)

// dev --tls gives its masters the README's ACL line.
func TestDevACLIsTheREADMEs(t *testing.T) {
	assert.Equal(t, readmeACLLine(t), "user redlockd on >CHANGE-ME-master-password "+devACLRules)
}

// `redlockd dev --tls` serves HTTPS with client certificates over TLS-only
// masters reached as the least-privilege ACL user; its printed curl
// files work; Ctrl-C stops it and deletes the certificates.
func TestDevTLS(t *testing.T) {
	addr := freeAddr(t)
	cmd := exec.Command(binary, "dev", "--tls", "--masters", "3", "--listen", addr, "--log-format", "json")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	logs := &syncBuffer{}
	cmd.Stderr = logs
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
	})

	var banner strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		banner.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "Ctrl-C stops") {
			break
		}
	}
	go func() { // keep draining, so the child never blocks on stdout
		for sc.Scan() {
		}
	}()
	out := banner.String()
	ca := regexp.MustCompile(`(?m)^  CA +(\S+)$`).FindStringSubmatch(out)
	client := regexp.MustCompile(`(?m)^  client +(\S+) +(\S+)$`).FindStringSubmatch(out)
	require.NotNil(t, ca, "%s\n%s", out, logs)
	require.NotNil(t, client, out)
	assert.Contains(t, out, "https://"+addr)
	assert.Contains(t, out, "--cacert "+ca[1]+" --cert "+client[1]+" --key "+client[2])

	c := httpsClient(t, &certgen.CA{CertFile: ca[1]}, certgen.Pair{CertFile: client[1], KeyFile: client[2]})
	base := "https://" + addr
	require.Eventually(t, func() bool {
		resp, err := c.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 20*time.Second, 20*time.Millisecond, "%s", logs)
	st, env, _ := postWith(t, c, lockURL(base), DevAPIKey, `{"key":"dev:tls","ttl":5}`)
	require.Equal(t, 200, st, env.Msg)
	assert.Equal(t, true, env.Data["acquired"])

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-exited:
		require.NoError(t, err, "%s", logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("dev did not stop on SIGINT: %s", logs)
	}
	_, err = os.Stat(ca[1])
	assert.True(t, os.IsNotExist(err), "the certificates are deleted: %v", err)
}
