package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/config"
	"github.com/redlockd/redlockd/redlock"
)

// masterClientCert is the client certificate presented to the masters,
// read from its files again by reload; each new connection presents the
// last one read.
type masterClientCert struct {
	certFile, keyFile string
	cur               atomic.Pointer[tls.Certificate]
}

func (m *masterClientCert) read() (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(m.certFile, m.keyFile)
	if err != nil {
		return nil, fmt.Errorf("master_tls_cert_file %s, master_tls_key_file %s: %w", m.certFile, m.keyFile, err)
	}
	// A certificate outside its validity is refused here, at startup and
	// on reload, as the listener's is (daemon.ServerTLS): every master
	// would refuse it, and a reload that took it would take every master
	// down at its next connection.
	leaf := c.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, fmt.Errorf("master_tls_cert_file %s: %w", m.certFile, err)
		}
	}
	switch now := time.Now(); {
	case now.After(leaf.NotAfter):
		return nil, fmt.Errorf("master_tls_cert_file %s: expired at %s (its not_after); every master would refuse it: renew it", m.certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return nil, fmt.Errorf("master_tls_cert_file %s: not valid before %s (its not_before); every master would refuse it until then: check the clock, or wait", m.certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return &c, nil
}

func (m *masterClientCert) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return m.cur.Load(), nil
}

// masterOptions are the go-redis options of every master: address, ACL
// user and password, and TLS (with the client certificate, returned for
// reload; nil without one). Errors name the setting and the file.
func masterOptions(cfg config.Config) ([]*redis.Options, *masterClientCert, error) {
	var tlsCfg *tls.Config
	var cert *masterClientCert
	if cfg.MasterTLS {
		// ServerName empty: crypto/tls takes each master's host from its
		// address (an IP is checked against the certificate's IP SANs).
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.MasterTLSServerName}
		if cfg.MasterTLSCAFile != "" {
			pem, err := os.ReadFile(cfg.MasterTLSCAFile)
			if err != nil {
				return nil, nil, fmt.Errorf("master_tls_ca_file: %w", err)
			}
			tlsCfg.RootCAs = x509.NewCertPool()
			if !tlsCfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, nil, fmt.Errorf("master_tls_ca_file: %s: no PEM certificate in it", cfg.MasterTLSCAFile)
			}
		}
		if cfg.MasterTLSCertFile != "" {
			cert = &masterClientCert{certFile: cfg.MasterTLSCertFile, keyFile: cfg.MasterTLSKeyFile}
			c, err := cert.read()
			if err != nil {
				return nil, nil, err
			}
			cert.cur.Store(c)
			tlsCfg.GetClientCertificate = cert.get
		}
	}
	opts := make([]*redis.Options, len(cfg.Masters))
	for i, addr := range cfg.Masters {
		opts[i] = &redis.Options{Addr: addr, Username: cfg.MasterUsername, Password: cfg.MasterPassword}
		if tlsCfg != nil {
			opts[i].TLSConfig = tlsCfg.Clone()
		}
	}
	return opts, cert, nil
}

// masterCheckTimeout bounds checkMasterAccess's connection to each master.
const masterCheckTimeout = 2 * time.Second

// checkMasterAccess connects to every master once, as the daemon will, and
// returns an error naming each master that refuses the daemon's
// credentials or TLS — a wrong password or ACL user, a certificate signed
// by another CA, a missing client certificate, TLS against a plain port or
// the reverse — with the settings to check. A configuration mistake is
// then a startup error, not a master shown down and 503s later. Masters
// that are down or do not answer in time are not an error here: the
// daemon starts and counts them when they come up.
//
// With commandsOf, the key prefix of the daemon's keys (serve; "" for
// repair-fences, which runs fewer), each master that answers is also
// asked to run every command the daemon runs there (commandProblem): a
// refusal is an error naming the commands, keys or channel, and one of an
// optional command a warning, returned.
//
// names, when not nil, names each master as the config does ("group g1's
// masters[0]"); otherwise each is "masters[i]".
func checkMasterAccess(ctx context.Context, masters []*redis.Options, names []string, commandsOf string) (warnings []string, err error) {
	errs := make([]error, len(masters))
	cmdErrs := make([]error, len(masters))
	warns := make([][]string, len(masters))
	runIDs := make([]string, len(masters))
	var wg sync.WaitGroup
	for i, mo := range masters {
		wg.Go(func() {
			o := *mo
			o.MaxRetries = -1
			o.DialTimeout, o.ReadTimeout, o.WriteTimeout = masterCheckTimeout, masterCheckTimeout, masterCheckTimeout
			o.PoolSize, o.MinIdleConns, o.DialerRetries = 2, 0, 1 // 2: the command check's SUBSCRIBE
			o.DisableIdentity = true
			r := redis.NewClient(&o)
			defer r.Close()
			cctx, cancel := context.WithTimeout(ctx, masterCheckTimeout)
			defer cancel()
			err := r.Ping(cctx).Err()
			if o.TLSConfig != nil && hungUp(err) {
				// With TLS 1.3 the client's side of the handshake ends
				// before the master checks the client certificate: its
				// refusal (an alert) can lose the race with the PING's
				// write, which then sees the connection closed (a CI run
				// named only two of three masters refusing it). Once more,
				// on a new connection, for the alert.
				r2 := redis.NewClient(&o)
				defer r2.Close()
				err = r2.Ping(cctx).Err()
			}
			problem := accessProblem(err, o.TLSConfig != nil)
			if o.TLSConfig != nil && o.TLSConfig.GetClientCertificate != nil && strings.Contains(problem, "set master_tls_cert_file") {
				// The files are set: the master refused the certificate
				// itself (another CA, or one it does not accept).
				problem = strings.Replace(problem, "if it requires a client certificate (tls-auth-clients), set master_tls_cert_file and master_tls_key_file",
					"it refused the client certificate of master_tls_cert_file: check that it is signed by a CA the master trusts (its tls-ca-cert-file) and valid now", 1)
			}
			if problem == "" && o.TLSConfig != nil && isTimeout(err) && answersPlainRESP(ctx, o.Addr) {
				// A plain Redis reads a TLS ClientHello as an inline
				// command that never ends: the handshake just times out,
				// as with a master that is down, so ask it plainly.
				problem = "it answers plain Redis, not TLS (the TLS handshake got no answer in " + masterCheckTimeout.String() + "): set master_tls: false, or use the master's tls-port"
			}
			if problem != "" {
				errs[i] = fmt.Errorf("masters[%d] (%s): %s", i, mo.Addr, problem)
			}
			if err == nil && commandsOf != "" {
				var p string
				p, warns[i] = commandProblem(cctx, r, i, mo.Addr, commandsOf)
				if p != "" {
					cmdErrs[i] = fmt.Errorf("masters[%d] (%s): %s", i, mo.Addr, p)
				}
				runIDs[i] = r.InfoMap(cctx, "server").Item("Server", "run_id")
			}
		})
	}
	wg.Wait()
	for _, w := range warns {
		warnings = append(warnings, w...)
	}
	var all []error
	if err := errors.Join(errs...); err != nil {
		all = append(all, fmt.Errorf("masters refuse the daemon's credentials or TLS:\n%w", err))
	}
	if err := errors.Join(cmdErrs...); err != nil {
		all = append(all, fmt.Errorf("masters refuse commands the daemon runs:\n%w", err))
	}
	// Two addresses of one server (localhost and 127.0.0.1, a DNS alias),
	// in one group or two: refused here, before any Client writes to the
	// masters. The Clients' own checks (CheckMasters, serversOnce) come
	// after their first probe round, which registers this daemon's max
	// TTL on every master: a daemon refused then left its max TTL (24 h by
	// default) bounding every later loss quarantine on those masters for
	// that long (a black-box pass).
	name := func(k int) string {
		if k < len(names) {
			return names[k]
		}
		return fmt.Sprintf("masters[%d]", k)
	}
	seen := map[string]int{}
	for i, id := range runIDs {
		if id == "" {
			continue
		}
		if j, dup := seen[id]; dup {
			all = append(all, fmt.Errorf("%w: %s (%s) and %s (%s) have run_id %s: list each master once, in one group", redlock.ErrSameServer, name(j), masters[j].Addr, name(i), masters[i].Addr, id[:min(8, len(id))]))
			continue
		}
		seen[id] = i
	}
	return warnings, errors.Join(all...)
}

// isTimeout reports whether err is a deadline: a master that did not
// answer in time.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// answersPlainRESP reports whether addr answers a plain-TCP PING with a
// RESP reply ('+PONG', or an error such as NOAUTH): a Redis without TLS on
// that port. A master that is down or paused answers nothing within a
// second and is not one.
func answersPlainRESP(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if conn.SetDeadline(deadline) != nil {
		return false
	}
	if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
		return false
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return false
	}
	return b[0] == '+' || b[0] == '-'
}

// hungUp reports whether err says the master closed the connection
// (EOF, reset, broken pipe) rather than answered or timed out.
func hungUp(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// accessProblem says what a PING's error tells about the credentials or
// TLS, with the settings to check, or "" when it is not such a refusal.
func accessProblem(err error, useTLS bool) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	var (
		unknownCA *x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
		alert     tls.AlertError
		record    tls.RecordHeaderError
		op        *net.OpError
	)
	switch {
	case strings.HasPrefix(msg, "WRONGPASS"), strings.HasPrefix(msg, "NOAUTH"),
		strings.HasPrefix(msg, "ERR AUTH"), strings.Contains(msg, "invalid password"):
		return "refused the credentials (" + msg + "): check master_username and master_password"
	case strings.HasPrefix(msg, "NOPERM"):
		return "the ACL user may not run PING (" + msg + "): give it the ACL line in docs/operations.md (TLS)"
	case errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalid), errors.As(err, &verify):
		return "its TLS certificate was not accepted (" + msg + "): check master_tls_ca_file and master_tls_server_name"
	case errors.As(err, &alert), errors.As(err, &op) && op.Op == "remote error":
		// crypto/tls reports an alert from the peer as a *net.OpError
		// "remote error" ("tls: certificate required").
		return "it refused the TLS handshake (" + msg + "): if it requires a client certificate (tls-auth-clients), set master_tls_cert_file and master_tls_key_file"
	case errors.As(err, &record):
		return "it does not speak TLS (" + msg + "): check master_tls and the port"
	case !useTLS && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		// A TLS-only Redis closes a connection whose first bytes are not
		// a TLS handshake.
		return "it closed the connection at once (" + msg + "): if it serves TLS only, set master_tls: true"
	}
	return ""
}
