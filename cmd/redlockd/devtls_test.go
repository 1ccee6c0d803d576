package main

import (
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/internal/certgen"
)

// dev --tls gives its masters the documented ACL line (docs/operations.md).
func TestDevACLIsTheREADMEs(t *testing.T) {
	assert.Equal(t, readmeACLLine(t), "user redlockd on >CHANGE-ME-master-password "+devACLRules)
}

// `redlockd dev --tls` serves HTTPS with client certificates over TLS-only
// masters reached as the least-privilege ACL user; its printed curl
// files work; Ctrl-C stops it and deletes the certificates.
func TestDevTLS(t *testing.T) {
	addr := freeAddr(t)
	d := startDev(t, "--tls", "--masters", "3", "--listen", addr, "--log-format", "json", "--max-ttl", "5")
	out, logs := d.banner, d.logs
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

	// The printed curl line's body works as printed under --max-ttl 5.
	st, env, _ = postWith(t, c, lockURL(base), DevAPIKey, d.tryBody(t))
	require.Equal(t, 200, st, env.Msg)
	assert.Equal(t, true, env.Data["acquired"], env.Msg)

	d.stop(t)
	_, err := os.Stat(ca[1])
	assert.True(t, os.IsNotExist(err), "the certificates are deleted: %v", err)
}
