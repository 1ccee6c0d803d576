// Package api holds the HTTP contract of redlockd as a file:
// openapi.yaml (OpenAPI 3.1), which the daemon serves at GET /openapi.yaml
// and from which clients in other languages can be generated.
package api

import _ "embed"

// OpenAPI is the content of openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
