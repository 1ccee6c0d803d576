package daemon

import (
	_ "embed"
	"net/http"
	"strconv"
)

// The dashboard is one HTML page and one script, embedded, with no external
// assets. The script polls GET /readyz and GET /v1/stats.
var (
	//go:embed web/dashboard.html
	dashboardHTML []byte
	//go:embed web/dashboard.js
	dashboardJS []byte
)

// dashboardCSP lets the page load only its own script and call only its
// own origin; inline styles are the page's own.
const dashboardCSP = "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func serveDashboard(w http.ResponseWriter, _ *http.Request) {
	serveAsset(w, "text/html; charset=utf-8", dashboardHTML)
}

func serveDashboardJS(w http.ResponseWriter, _ *http.Request) {
	serveAsset(w, "text/javascript; charset=utf-8", dashboardJS)
}

func serveAsset(w http.ResponseWriter, contentType string, body []byte) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Security-Policy", dashboardCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}
