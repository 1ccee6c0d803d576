package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGroupsChangeRefusesWhatIsNotAReadyz: an answer that is not a
// daemon's /readyz (an admin listener's 401, a 404 for a URL that already
// ends in /readyz, another service's JSON) is an error naming the URL,
// not "a daemon on [default], not moving" with exit 0, which a break-it
// pass got for each; a /readyz that answers 503 (no quorum) is a daemon's.
func TestGroupsChangeRefusesWhatIsNotAReadyz(t *testing.T) {
	for name, tc := range map[string]struct {
		status int
		body   string
		want   string
	}{
		"admin listener":  {http.StatusUnauthorized, `{"ret":"err","code":"unauthorized"}`, "401 Unauthorized: not a redlockd /readyz answer"},
		"path twice":      {http.StatusNotFound, `{"ret":"err","code":"not_found"}`, "404 Not Found: not a redlockd /readyz answer"},
		"another service": {http.StatusOK, `{"status":"ok"}`, "not a redlockd /readyz answer (no quorum field)"},
		"not JSON":        {http.StatusOK, `<html>`, "invalid character"},
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			var out, errOut bytes.Buffer
			err := groupsChange(context.Background(), []string{"--daemons", srv.URL}, &out, &errOut)
			require.Error(t, err, "stdout: %s", out.String())
			assert.Contains(t, err.Error(), srv.URL+"/readyz")
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, out.String(), "not moving")
		})
	}
	// A daemon without a quorum answers /readyz with 503: still a placement.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"ready":false,"quorum":{"needed":3}}`))
	}))
	defer srv.Close()
	var out, errOut bytes.Buffer
	require.NoError(t, groupsChange(context.Background(), []string{"--daemons", srv.URL}, &out, &errOut))
	assert.Contains(t, out.String(), "on the groups [default], not moving")
}
