package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	"github.com/redlockd/redlockd/config"
	"github.com/redlockd/redlockd/internal/certgen"
	"github.com/redlockd/redlockd/internal/redisproc"
)

// devACLRules are the documented least-privilege ACL line (docs/operations.md, "TLS") for the default
// key_prefix, after the user name and password (TestDevACLIsTheREADMEs
// keeps the two the same).
const devACLRules = "~redlock:* resetchannels &redlock:* -@all +ping +info +time +get +mget +set +del +exists +scan +pexpire +pexpireat +pexpiretime +pttl +publish +subscribe +hget +hgetall +hset +zadd +zcard +zrange +zrem +zremrangebyscore +zscore +eval +evalsha +script|load"

// devCerts are the files `redlockd dev --tls` made: the CA every side
// trusts and the client certificate for curl and `redlockd lock`.
type devCerts struct {
	ca     string
	client certgen.Pair
}

// devTLS makes a CA and certificates in dir and sets cfg and the masters'
// options for TLS on both sides: TLS-only masters requiring client
// certificates, whose default user has a random password and whose only
// other user is the least-privilege "redlockd" with another; the daemon
// connects as that user with its own client certificate, and serves HTTPS
// requiring client certificates.
func devTLS(dir string, cfg *config.Config, procOpts *redisproc.Options) (*devCerts, error) {
	ca, err := certgen.NewCA(dir, "redlockd-dev-ca")
	if err != nil {
		return nil, err
	}
	var pairs [4]certgen.Pair
	for i, spec := range []struct {
		name  string
		hosts []string
	}{
		{"redis", []string{"127.0.0.1", "localhost"}},
		{"redlockd-to-redis", nil},
		{"redlockd", []string{"127.0.0.1", "localhost"}},
		{"client", nil},
	} {
		if pairs[i], err = ca.Issue(spec.name, spec.hosts...); err != nil {
			return nil, err
		}
	}
	redisCert, toRedis, server, client := pairs[0], pairs[1], pairs[2], pairs[3]
	adminPassword, userPassword := randomSecret(), randomSecret()
	procOpts.TLS = &redisproc.TLS{CertFile: redisCert.CertFile, KeyFile: redisCert.KeyFile, CAFile: ca.CertFile}
	procOpts.Password = adminPassword
	procOpts.ExtraArgs = append([]string{"--user", "redlockd", "on", ">" + userPassword}, strings.Fields(devACLRules)...)

	cfg.MasterUsername, cfg.MasterPassword = "redlockd", userPassword
	cfg.MasterTLS, cfg.MasterTLSCAFile = true, ca.CertFile
	cfg.MasterTLSCertFile, cfg.MasterTLSKeyFile = toRedis.CertFile, toRedis.KeyFile
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSClientCAFile = server.CertFile, server.KeyFile, ca.CertFile
	return &devCerts{ca: ca.CertFile, client: client}, nil
}

func randomSecret() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails on Linux
	return hex.EncodeToString(b)
}

func printDevTLS(stdout io.Writer, addr, apiKey string, ttl int, masters string, c *devCerts) {
	url := "https://" + addr
	tlsFlags := fmt.Sprintf("--cacert %s --cert %s --key %s", c.ca, c.client.CertFile, c.client.KeyFile)
	fmt.Fprintf(stdout, `redlockd dev is running, TLS on both sides.

  URL       %s   (HTTPS; a client certificate is required)
  API key   %s   (account "dev")
  CA        %s
  client    %s  %s
  masters   (TLS only, ACL user "redlockd")
            %s

Try:
  curl -s %s -X POST %s/v1/lock -H 'X-API-Key: %s' -H 'Content-Type: application/json' -d '{"action":"acquire","key":"order:pay:10086","ttl":%d}'
  REDLOCKD_URL=%s REDLOCKD_API_KEY=%s REDLOCKD_TLS_CA=%s REDLOCKD_TLS_CERT=%s REDLOCKD_TLS_KEY=%s redlockd lock status --key order:pay:10086

Dashboard %s/ (the browser needs the client certificate)   Ready %s/readyz   Metrics %s/metrics
Ctrl-C stops the daemon and the masters, and deletes the certificates.

`, url, apiKey, c.ca, c.client.CertFile, c.client.KeyFile, masters,
		tlsFlags, url, apiKey, ttl,
		url, apiKey, c.ca, c.client.CertFile, c.client.KeyFile,
		url, url, url)
}
