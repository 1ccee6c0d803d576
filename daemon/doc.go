// Package daemon is redlockd's HTTP server: the action API over a Locker
// (a quorum of Redis masters, see package redlock), API-key tenants and
// namespaces, health, Prometheus metrics and a dashboard page.
//
// # Endpoints
//
//   - POST /v1/lock, and the alias POST /gateway/distlock: the action API.
//   - GET /healthz: 200 {"status":"ok"} while the process runs.
//   - GET /readyz: 200 when a quorum of masters counts (up, not quarantined,
//     not awaiting a fencing repair) and the server is not shutting down,
//     else 503; the body gives the quorum status and every master's state,
//     quarantine reason and remaining time, clock offset and drift and
//     configuration warnings either way (see readyBody in health.go).
//   - GET /metrics: Prometheus; see Metrics for the names.
//   - GET /v1/stats: request counts and latency sums since start, as JSON.
//   - GET /v1/history: the last 15 minutes, one sample a second, kept in
//     memory (see historyBody in history.go); ?since_ms= lists only newer
//     samples.
//   - GET /openapi.yaml: the HTTP contract (api/openapi.yaml, OpenAPI 3.1).
//   - GET /: the dashboard (masters with state, quarantine countdown and
//     reason, clock offset and drift, warnings; quorum; and charts of the
//     history: state bands, quorum, outcome rates, acquire p50/p99, clock
//     offset, drift and probe latency, drawn as SVG by its own script).
//   - POST /admin/reload (admin listener only): read the configuration
//     again and apply the API keys; see below.
//   - GET /admin/locks?account=&namespace=&cursor=&limit= (admin listener
//     only): one page of the locks held for an account, with namespace,
//     key, remaining TTL and fence, never a token (serveLockList in
//     locklist.go); at most MaxListings at once per daemon and
//     MaxAccountListings per account, 429 too_many_listings past them.
//   - Any other path: 404 with the JSON envelope, code not_found, a msg
//     naming the path and listing the listener's endpoints. A wrong method on a
//     known path is 405, code method_not_allowed. ServeMux's path cleaning still redirects first
//     ("//v1/lock" → 307 to /v1/lock), which is left as it is, except that
//     a URL carrying an API key (path segment or query) is refused with
//     400 rather than echoed in Location.
//
// On every route, before routing and before any authentication, the URL
// is checked at a cost that does not grow with the request (checkURL in
// urlcheck.go): a path or query string over 1024 bytes is 414
// uri_too_long, more than 16 query parameters 400, and a credential in
// the URL 400 (see below), the same message on every route. A request
// with both Content-Length and Transfer-Encoding is refused with 400 and
// its connection closed (framing.go).
//
// Only the action API needs an API key. The others disclose master
// addresses and aggregate counts, never a token, and a lock key only on
// the admin listener (GET /admin/locks); expose them only where that is
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
// # The action API
//
// The request is a JSON object {action, key, ttl, token, namespace,
// wait_ms}; the X-API-Key header names the account. Every response is the
// envelope
//
//	{"ret":"ok","data":{...},"msg":"","remain_quota":-1}
//	{"ret":"err","data":null,"msg":"ttl: 0 is below the minimum of 1","code":"bad_request","remain_quota":-1}
//
// An answered action is 200, including acquired:false, released:false,
// extended:false and held:false, with a msg that says why. Failures are 400
// bad_request (msg names the field and the limit), 401 unauthorized, 404
// not_found, 405 method_not_allowed (header Allow: POST), 413 too_large,
// 415 unsupported_media_type, 503 quorum_unavailable (header Retry-After)
// and 500 internal, which is always a bug and is logged with the cause.
//
// remain_quota: the calls the account has left in its quota window after
// this call, or -1 (RemainQuota) when it has no quota. An account's quota,
// rate limit and cap on held locks (AccountLimits) are shared by every
// daemon on the same masters; see limits.go. Calls past them are refused
// with 429 quota_exhausted, rate_limited or too_many_locks (header
// Retry-After) before any master is asked.
//
// data carries: action; key (the caller's key, not the Redis key);
// acquired / released / extended / held; token (a successful acquire only);
// ttl (acquire and extend: the granted TTL in seconds; status: remaining
// whole seconds, rounded down); expire_at (Unix seconds, floor of now +
// validity, never later than the truth); validity_ms; retry_after (a failed
// acquire: seconds until the holder's lock ends, rounded up, at least 1).
// data.fence is the fencing token of a successful acquire or extend
// (redlock's Lock.Fence); it is absent when the Locker gives none (0,
// fencing disabled) and is never made up.
//
// # Decisions where the design left room
//
//   - Checks run in this order, the first failure answering: the URL (as on
//     every route: an API key or token in the query string — any parameter
//     whose name contains "key" or "token", any case, or whose name or
//     value is a configured API key, compared by SHA-256 in constant time,
//     at most 8 parts of the URL hashed — or a path segment that is one;
//     400, the value is never echoed), method (405), more than one
//     X-API-Key header (400, "send exactly one X-API-Key header":
//     ambiguous credentials are refused, not resolved), a source with too
//     many failed authentications (429 too_many_auth_failures, the key not
//     looked at; authlimit.go), X-API-Key missing or unknown (401),
//     Content-Type (415), body size (413), body (400).
//   - Content-Type may be absent (the body must still be JSON); if present
//     it must be application/json, optionally with charset=utf-8. Anything
//     else, including curl -d's default form type, is 415.
//   - The body is decoded strictly: one object, exact case-sensitive field
//     names, each at most once, nothing after the object. An explicit
//     null is not absent: it is refused like any other wrong type, naming
//     the field ("action: must be a string, got null"), so a client that
//     sends null for "unset" is told rather than given a default. ttl and
//     wait_ms must be written as integers: "30", 30.5, 30.0, 1e3, true and
//     null are refused. A body that is not well-formed
//     JSON is "malformed JSON at byte N"; "must be a JSON object, got …"
//     is only said of well-formed JSON of another type.
//   - An absent action means acquire; an empty string is refused
//     like any other value outside acquire, release, extend, status. An
//     empty namespace is the same as none. token is required (32 lowercase
//     hex) for release and extend and ignored by acquire and status. ttl is
//     used by acquire and extend and ignored by release and status; wait_ms
//     is used by acquire and ignored by the others. Ignored means entirely:
//     any value of any type (out of range, a string, an object) is accepted
//     and has no effect, so one body shape works for every action. It must
//     still be well-formed JSON and appear at most once.
//   - wait_ms above the configured maximum is refused, not lowered.
//   - A request whose client disconnects is cancelled (an acquire then
//     cleans up its keys), counted and logged as "cancelled", and answered
//     499, which nobody reads.
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
