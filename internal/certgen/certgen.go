// Package certgen makes a throwaway certificate authority and the
// certificates it signs, as PEM files, and client configurations that
// trust it, for tests and `redlockd dev --tls`: TLS to the masters and to
// the daemon without openssl. Keys are ECDSA P-256; certificates are valid
// from an hour ago for a day. Nothing here is meant for production
// certificates.
package certgen

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority whose certificate is in CertFile.
type CA struct {
	// CertFile is the CA certificate (PEM), the file clients and servers
	// trust.
	CertFile string
	dir      string
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
}

// Pair names a certificate file and its private key file (PEM).
type Pair struct{ CertFile, KeyFile string }

// NewCA makes a CA named name and writes its certificate to
// dir/name.crt. dir must exist.
func NewCA(dir, name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{CertFile: filepath.Join(dir, name+".crt"), dir: dir, cert: cert, key: key}
	if err := writePEM(ca.CertFile, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	return ca, nil
}

// Issue signs a certificate named name for hosts (IP addresses or DNS
// names; none for a client-only certificate) and writes it and its key to
// dir/name.crt and dir/name.key, replacing files of those names. It may be
// used as a server and as a client certificate.
func (ca *CA) Issue(name string, hosts ...string) (Pair, error) {
	return ca.IssueValid(name, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), hosts...)
}

// IssueValid is Issue with a certificate valid from notBefore to
// notAfter, for tests of certificates expired or not yet valid.
func (ca *CA) IssueValid(name string, notBefore, notAfter time.Time, hosts ...string) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return Pair{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Pair{}, err
	}
	p := Pair{CertFile: filepath.Join(ca.dir, name+".crt"), KeyFile: filepath.Join(ca.dir, name+".key")}
	if err := writePEM(p.KeyFile, "PRIVATE KEY", keyDER); err != nil {
		return Pair{}, err
	}
	if err := writePEM(p.CertFile, "CERTIFICATE", der); err != nil {
		return Pair{}, err
	}
	return p, nil
}

// ClientConfig is a TLS client configuration that trusts the certificates
// in ca.CertFile and, when cert names files, presents cert. It reads only
// CertFile, so &CA{CertFile: f} serves for a CA known by its file alone.
func (ca *CA) ClientConfig(cert Pair) (*tls.Config, error) {
	caPEM, err := os.ReadFile(ca.CertFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{RootCAs: x509.NewCertPool()}
	if !cfg.RootCAs.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", ca.CertFile)
	}
	if cert.CertFile != "" {
		c, err := tls.LoadX509KeyPair(cert.CertFile, cert.KeyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(fmt.Sprintf("certgen: crypto/rand: %v", err)) // cannot happen on Linux
	}
	return n
}

// writePEM writes one PEM block to path through a temporary file and a
// rename, so that a reader never sees half a file.
func writePEM(path, typ string, der []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
