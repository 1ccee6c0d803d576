package daemon

import (
	"net/http"
	"strconv"

	"github.com/redlockd/redlockd/api"
)

var openAPILength = []string{strconv.Itoa(len(api.OpenAPI))}

// serveOpenAPI answers GET /openapi.yaml with the HTTP contract
// (api/openapi.yaml, OpenAPI 3.1). It needs no API key.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/yaml")
	h["Content-Length"] = openAPILength
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(api.OpenAPI)
}
