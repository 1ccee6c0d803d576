package client

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReplayKeepsTheStoredContentType: a replayed answer carries the
// Content-Type it was stored with, under whatever case the storing client
// named it (a record completed over HTTP from another language may say
// "content-type"), and none when it was stored without one, never the
// type net/http would sniff from the body.
func TestReplayKeepsTheStoredContentType(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers map[string]string
		want    []string
	}{
		{"canonical", map[string]string{"Content-Type": "application/json"}, []string{"application/json"}},
		{"lower case", map[string]string{"content-type": "application/json"}, []string{"application/json"}},
		{"none", map[string]string{"Location": "/orders/1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				replay(w, &Answer{Status: http.StatusCreated, Headers: tc.headers, Body: []byte("created")})
			}))
			defer srv.Close()
			resp, err := srv.Client().Get(srv.URL)
			require.NoError(t, err)
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, "created", string(b))
			require.Equal(t, tc.want, resp.Header.Values("Content-Type"))
		})
	}
}
