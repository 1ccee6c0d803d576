package daemon

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/redlockd/redlockd/api"
)

func TestServesOpenAPI(t *testing.T) {
	ts := newTestServer(t, newFakeLocker())
	r := ts.do(t, http.MethodGet, "/openapi.yaml", "", nil)
	assert.Equal(t, http.StatusOK, r.Status)
	assert.Equal(t, "application/yaml", r.Header.Get("Content-Type"))
	assert.Equal(t, string(api.OpenAPI), r.Raw, "the file, as is, without an API key")
	assert.Contains(t, r.Raw, "openapi: 3.1.0")

	r = ts.do(t, http.MethodPost, "/openapi.yaml", "", nil)
	assert.Equal(t, http.StatusMethodNotAllowed, r.Status)
}
