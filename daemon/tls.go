package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// TLSFiles are the PEM files of the listeners' TLS: the certificate chain
// and its key, and optionally the CA that client certificates must chain
// to (mutual TLS).
type TLSFiles struct {
	CertFile, KeyFile string
	// ClientCAFile, if set, makes every connection present a client
	// certificate signed by one of its CAs; the handshake fails otherwise.
	ClientCAFile string
}

// ServerTLS is the listeners' TLS configuration, read from TLSFiles and
// read again by Reload. Connections already open keep the certificate
// they were made with; every handshake after a Reload uses the new files.
// Safe for concurrent use.
type ServerTLS struct {
	files TLSFiles
	cur   atomic.Pointer[tlsState]
}

// tlsState is one reading of the files: the config each handshake gets.
type tlsState struct {
	config   *tls.Config
	notAfter time.Time
	subject  string
}

// NewServerTLS reads files. Errors name the file and what is wrong with
// it, never the key's content. A certificate that has expired or is not
// valid yet is refused: every TLS client would refuse it.
func NewServerTLS(files TLSFiles) (*ServerTLS, error) {
	if files.CertFile == "" || files.KeyFile == "" {
		return nil, errors.New("daemon: TLS: a certificate file and a key file are both required")
	}
	t := &ServerTLS{files: files}
	st, err := t.read()
	if err != nil {
		return nil, err
	}
	t.cur.Store(st)
	return t, nil
}

// Reload reads the files again. If any of them cannot be used (a
// certificate expired or not valid yet included), it returns the error and
// the certificate in use stays.
func (t *ServerTLS) Reload() error {
	st, err := t.read()
	if err != nil {
		return err
	}
	t.cur.Store(st)
	return nil
}

// Certificate describes the certificate in use: its subject and its end of
// validity, for logs.
func (t *ServerTLS) Certificate() (subject string, notAfter time.Time) {
	st := t.cur.Load()
	return st.subject, st.notAfter
}

// Config returns the tls.Config for a listener: TLS 1.2 at least, HTTP/1.1
// only, and per handshake the certificate (and client CA) of the last
// successful read.
func (t *ServerTLS) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return t.cur.Load().config, nil
		},
	}
}

func (t *ServerTLS) read() (*tlsState, error) {
	cert, err := tls.LoadX509KeyPair(t.files.CertFile, t.files.KeyFile)
	if err != nil {
		// LoadX509KeyPair's errors name no file and never include the key.
		return nil, fmt.Errorf("daemon: TLS certificate %s with key %s: %w", t.files.CertFile, t.files.KeyFile, err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("daemon: TLS certificate %s: %w", t.files.CertFile, err)
		}
	}
	if err := checkValidity(t.files.CertFile, leaf, time.Now()); err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
		Certificates: []tls.Certificate{cert},
	}
	if t.files.ClientCAFile != "" {
		pool, err := loadCAFile(t.files.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("daemon: TLS client CA: %w", err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return &tlsState{config: cfg, notAfter: leaf.NotAfter, subject: leaf.Subject.String()}, nil
}

// checkValidity refuses a certificate outside its validity period at now,
// naming the file and the date.
func checkValidity(file string, leaf *x509.Certificate, now time.Time) error {
	switch {
	case now.After(leaf.NotAfter):
		return fmt.Errorf("daemon: TLS certificate %s: expired at %s (its not_after); every TLS client would refuse it: renew it", file, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return fmt.Errorf("daemon: TLS certificate %s: not valid before %s (its not_before); every TLS client would refuse it until then: check the clock, or wait", file, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

// loadCAFile reads a PEM file of one or more CA certificates.
func loadCAFile(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", path)
	}
	return pool, nil
}
