// Package dashtest checks redlockd's dashboards against the real things:
// a real Prometheus (Debian's binary) scraping a real daemon evaluates
// every PromQL expression of deploy/grafana/redlockd.json and
// deploy/prometheus/redlockd.rules.yml, and headless Chromium (Debian's
// chromium, driven by chromedp) checks the daemon's own page at / while
// masters are killed and restarted empty.
//
// It is a module of its own so that chromedp and the Prometheus libraries
// never enter the product's go.mod. Run it with `make test` or
// `cd dashtest && go test ./...`. Without prometheus or chromium the tests
// skip, unless REDLOCK_REQUIRE_PROMETHEUS=1 or REDLOCK_REQUIRE_BROWSER=1
// (set by .ci/run) makes that a failure. Screenshots of the page go to
// $REDLOCK_ARTIFACTS (default: dist/screenshots in the repository).
package dashtest
