package main

import (
	"crypto/x509"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlockd/redlockd/daemon"
)

// registerTLSMetrics exports the end of validity of the certificates in
// use, so that an alert can fire before one expires:
// redlockd_tls_certificate_expiry_timestamp_seconds{certificate="listener"}
// (the listeners' HTTPS certificate) and {certificate="masters_client"}
// (the client certificate presented to the masters), each only when
// configured. A reload changes them.
func registerTLSMetrics(reg prometheus.Registerer, srv *daemon.ServerTLS, masters *masterClientCert) {
	const name, help = "redlockd_tls_certificate_expiry_timestamp_seconds", "When the certificate in use stops being valid (its NotAfter), Unix seconds."
	if srv != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: prometheus.Labels{"certificate": "listener"}}, func() float64 {
			_, notAfter := srv.Certificate()
			return float64(notAfter.Unix())
		}))
	}
	if masters != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: prometheus.Labels{"certificate": "masters_client"}}, func() float64 {
			c := masters.cur.Load()
			leaf := c.Leaf
			if leaf == nil {
				var err error
				if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
					return 0
				}
			}
			return float64(leaf.NotAfter.Unix())
		}))
	}
}

// reloadCounter counts reloads by result: redlockd_config_reloads_total
// {result="ok"} and {result="refused"}.
func newReloadCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "redlockd_config_reloads_total",
		Help: "Configuration reloads (SIGHUP, POST /admin/reload) by result: ok, or refused (the old configuration stays).",
	}, []string{"result"})
	c.WithLabelValues("ok")
	c.WithLabelValues("refused")
	reg.MustRegister(c)
	return c
}
