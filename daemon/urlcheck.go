package daemon

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Bounds of the URL, checked on every request before anything else, and
// before authentication. They keep the work done for an unauthenticated
// request independent of its size: a request of any size is refused, or
// costs at most maxURLHashes SHA-256 sums of at most maxQueryBytes bytes.
const (
	// maxPathBytes bounds the (unescaped) path; a longer one is 414.
	maxPathBytes = 1024
	// maxQueryBytes bounds the raw query string; a longer one is 414.
	maxQueryBytes = 1024
	// maxQueryParams bounds the parameters of the query string (separated
	// by '&' or ';'); more are 400.
	maxQueryParams = 16
	// maxURLHashes is how many parts of the URL (path segments, query
	// names and values, raw and unescaped) are hashed to be compared with
	// the configured API keys. A URL with more parts that could be keys is
	// refused (400) rather than checked in part.
	maxURLHashes = 8
	// minAPIKeyBytes is the shortest API key the configuration accepts
	// (config: api_keys[].key); shorter parts of a URL are never hashed.
	minAPIKeyBytes = 16
)

// URL messages; none quotes the URL, so no credential is echoed.
const (
	msgURLKeyCandidates = "URL: more than 8 path segments and query names or values could be API keys (16 or more printable characters); send the API key in the X-API-Key header"
)

// checkURL runs the URL checks of every route, before routing and before
// authentication: the path and query string within their bounds (414,
// 400), no credential-looking query parameter name (api_key, token, …), and
// no configured API key as a path segment or query name or value (400).
// It returns the status and message of the refusal, or 0.
//
// The cost is bounded whatever the request: the lengths are compared
// first, and at most maxURLHashes parts — only those that could be an API
// key by their length and bytes — are hashed.
func (s *Server) checkURL(r *http.Request) (int, string) {
	path, query := r.URL.Path, r.URL.RawQuery
	if len(path) > maxPathBytes {
		return http.StatusRequestURITooLong, "URL path: " + strconv.Itoa(len(path)) + " bytes is above the limit of " + strconv.Itoa(maxPathBytes) + " bytes"
	}
	if len(query) > maxQueryBytes {
		return http.StatusRequestURITooLong, "URL query string: " + strconv.Itoa(len(query)) + " bytes is above the limit of " + strconv.Itoa(maxQueryBytes) + " bytes"
	}
	if query != "" {
		if n := 1 + strings.Count(query, "&") + strings.Count(query, ";"); n > maxQueryParams {
			return http.StatusBadRequest, "URL query string: " + strconv.Itoa(n) + " parameters is above the limit of " + strconv.Itoa(maxQueryParams)
		}
	}
	c := urlKeyCheck{s: s, left: maxURLHashes}
	for seg := range strings.SplitSeq(path, "/") {
		if c.isKey(seg) {
			return http.StatusBadRequest, msgPathSecret
		}
	}
	if query != "" && c.secretInQuery(query) {
		return http.StatusBadRequest, msgQuerySecret
	}
	if c.over {
		return http.StatusBadRequest, msgURLKeyCandidates
	}
	return 0, ""
}

// urlKeyCheck compares parts of one URL with the configured API keys,
// hashing at most left of them.
type urlKeyCheck struct {
	s    *Server
	left int
	over bool // a part that could be a key was not hashed: the budget ran out
}

// isKey reports whether v is a configured API key. Parts that cannot be
// one (shorter than any key, or with bytes no key has) cost no hash.
func (c *urlKeyCheck) isKey(v string) bool {
	if !couldBeAPIKey(v) {
		return false
	}
	if c.left == 0 {
		c.over = true
		return false
	}
	c.left--
	c.s.urlHashes.Add(1)
	return c.s.isAPIKey(v)
}

// couldBeAPIKey reports whether v has the shape of an API key the
// configuration accepts: at least minAPIKeyBytes of printable ASCII.
func couldBeAPIKey(v string) bool {
	if len(v) < minAPIKeyBytes {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return true
}

// secretInQuery reports whether a raw query string carries a credential:
// a parameter whose name looks like one (secretName), or a parameter name
// or value that is a configured API key (as sent and unescaped, so
// "?foo=<key>" and "?<key>" are caught). Anything else, such as "?x=1", is
// allowed.
func (c *urlKeyCheck) secretInQuery(raw string) bool {
	for raw != "" {
		var part string
		part, raw, _ = cutAny(raw, "&;")
		rawName, rawValue, _ := strings.Cut(part, "=")
		name, value := rawName, rawValue
		if n, err := url.QueryUnescape(rawName); err == nil {
			name = n
		}
		if v, err := url.QueryUnescape(rawValue); err == nil {
			value = v
		}
		if secretName(name) {
			return true
		}
		if c.isKey(name) || c.isKey(value) ||
			(rawName != name && c.isKey(rawName)) || (rawValue != value && c.isKey(rawValue)) {
			return true
		}
	}
	return false
}
