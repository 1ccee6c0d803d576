package chaos

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRecoverNamesALongerMaxTTL: after kill-3's repair-fences, masters
// stay out for the longest max TTL any client of the deployment allows. A
// compose drill brought up over a plain `make up` deployment (max_ttl 600)
// waited for 12 s and timed out with "masters counting: [false false false
// true true]", naming no cause; the check names it at once.
func TestRecoverNamesALongerMaxTTL(t *testing.T) {
	longest := int64(12)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"longest_max_ttl_s":%d,"masters":[{},{},{},{},{}]}`, longest)
	}))
	defer srv.Close()
	tg := &DockerTarget{daemons: []Daemon{{Name: "a", URL: srv.URL}}, hc: srv.Client(), ids: make([]string, 5)}
	ctx := context.Background()

	require.NoError(t, tg.longerMaxTTL(ctx, 12*time.Second, 12*time.Second), "every client within the drill's max TTL")

	err := tg.longerMaxTTL(ctx, 12*time.Second, 600*time.Second)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "10m0s (registered on the masters)")
	assert.Contains(t, err.Error(), "make down")

	longest = 600 // the registry expired, but the daemon keeps what it saw
	err = tg.longerMaxTTL(ctx, 12*time.Second, 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "known to the daemon at "+srv.URL)
}
