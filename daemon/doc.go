// Package daemon is redlockd's HTTP server: the action API over a Locker
// (a quorum of Redis masters, see package redlock), API-key tenants and
// namespaces, account limits, health (read from a MasterHealth),
// Prometheus metrics and a dashboard page.
//
// This comment describes the package. The wire — every endpoint, field,
// answer, status code and error code — is specified once, in
// api/openapi.yaml (served at GET /openapi.yaml, embedded through package
// api), and explained in docs/api.md; the operator endpoints are explained
// in docs/operations.md.
//
// # Where things are
//
//   - server.go: New, Options, the routes of the public and the admin
//     listener (routes), Serve and the draining stop.
//   - lock.go, request.go, jsonscan.go, response.go: the action API
//     (serveLock): the body is decoded strictly (parseLockRequest), checked,
//     limited, run on the Locker and answered in the envelope
//     (response.go).
//   - urlcheck.go, framing.go: checks that run on every route before
//     routing and authentication, at a cost that does not grow with the
//     request (URL length, query parameters, credentials in the URL;
//     Content-Length together with Transfer-Encoding).
//   - authlimit.go: the per-source limit on failed authentications.
//   - admission.go and package limits (limits/): account quotas, rate
//     limits and held-lock caps, shared by every daemon on the same masters
//     through counters on the masters. A request deals with them through
//     one limits.Admission (call.limits), taken when its API key is known;
//     admission.go maps its refusals to 429 answers and checks the
//     configured limits.
//   - waiters.go: acquires waiting with wait_ms, woken by release
//     notifications.
//   - locker.go, masterhealth.go: what the Server is given: the lock
//     actions (Locker) and the masters' health (MasterHealth), and their
//     adapters over a *redlock.Client; groups.go and moving.go serve
//     several master groups as one.
//   - health.go: /healthz and /readyz (readyBody).
//   - quorum.go: why no quorum voted and when to retry: the message and
//     Retry-After of a 503 quorum_unavailable.
//   - metrics.go, history.go, dashboard.go: Prometheus metrics, the
//     in-memory history and the page at /.
//   - admin.go, locklist.go: the admin listener, POST /admin/reload and
//     GET /admin/locks (at most MaxListings at once per daemon and
//     MaxAccountListings per account).
//   - openapi.go: GET /openapi.yaml.
//   - keys.go: the Redis key of a lock.
//   - tls.go: the listeners' certificates, reloadable.
//
// Only the action API needs an API key. The other endpoints disclose
// master addresses and aggregate counts, never a token, and a lock key only
// on the admin listener (GET /admin/locks); expose them only where that is
// acceptable.
//
// # The admin listener
//
// With Options.AdminListen, Serve opens a second listener for the operator
// endpoints (adminRoutes in admin.go: the dashboard, /metrics, /v1/stats,
// /v1/history, POST /admin/reload and GET /admin/locks), which the public listener then no
// longer serves; the admin listener also answers /healthz and /readyz. An
// endpoint in that group that is not marked publicWithoutAdmin (anything
// that changes state or shows more than the dashboard) exists only on an
// admin listener. Options.AdminToken, if set, guards every admin request
// (bearer token or basic-auth password, compared by SHA-256 in constant
// time); otherwise the listener is meant for loopback or a private network,
// as etcd's metrics listener and Prometheus's lifecycle endpoints are.
// POST /admin/reload runs Options.Reload; SetAPIKeys swaps the accounts
// and SetAdminToken the admin token atomically, so requests already
// authenticated finish and the next one sees the new keys or token.
// SetAdminToken refuses to remove a token: only a restart opens the admin
// listener.
//
// # Tenants and keys
//
// A lock's Redis key is KeyPrefix + "lock:" + a length-prefixed encoding of
// (account, namespace, key); see keys.go for why it is injective. The same
// key under two accounts, or two namespaces, is two different locks, and an
// account can never release, extend or see another account's lock.
//
// # Logging
//
// One line per action API request at debug; 503 at warn and 500 at error,
// with the cause. Lines carry the account and at most the first 8 hex
// characters of a token's SHA-256, never an API key or a token.
package daemon
