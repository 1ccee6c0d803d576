package daemon

import (
	"encoding/json"
	"math"
	"net/http"
)

// readyBody is GET /readyz:
//
//	{"ready":true,"status":"ready",
//	 "quorum":{"needed":3,"up":5,"masters":5},
//	 "masters":[{"index":0,"addr":"127.0.0.1:6379","state":"up",
//	             "latency_ms":0.213,"last_error":"","checked_at_ms":1735689600123}, …]}
//
// status is "ready", "no_quorum" or "shutting_down". latency_ms is the
// round trip of the master's last health probe; checked_at_ms (Unix
// milliseconds) is absent before the first probe; last_error is the last
// probe or connection error, kept after the master recovers.
type readyBody struct {
	Ready   bool          `json:"ready"`
	Status  string        `json:"status"`
	Quorum  readyQuorum   `json:"quorum"`
	Masters []readyMaster `json:"masters"`
}

type readyQuorum struct {
	Needed  int `json:"needed"`
	Up      int `json:"up"`
	Masters int `json:"masters"`
}

type readyMaster struct {
	Index       int     `json:"index"`
	Addr        string  `json:"addr"`
	State       string  `json:"state"` // "up" or "down"
	LatencyMS   float64 `json:"latency_ms"`
	LastError   string  `json:"last_error"`
	CheckedAtMS int64   `json:"checked_at_ms,omitempty"`
}

// serveHealthz answers 200 while the process runs, shutting down included.
func (s *Server) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, []byte(`{"status":"ok"}`+"\n"))
}

// serveReadyz answers 200 when the Locker reports a quorum of masters up
// and the server is not shutting down, else 503; the body lists every
// master either way.
func (s *Server) serveReadyz(w http.ResponseWriter, _ *http.Request) {
	ms := s.locker.Masters()
	body := readyBody{
		Status:  "ready",
		Quorum:  readyQuorum{Needed: s.locker.Quorum(), Masters: len(ms)},
		Masters: make([]readyMaster, len(ms)),
	}
	for i, m := range ms {
		rm := readyMaster{
			Index:     m.Index,
			Addr:      m.Addr,
			State:     "down",
			LatencyMS: math.Round(float64(m.Latency.Microseconds())) / 1000,
			LastError: m.LastError,
		}
		if m.Up {
			rm.State = "up"
			body.Quorum.Up++
		}
		if !m.CheckedAt.IsZero() {
			rm.CheckedAtMS = m.CheckedAt.UnixMilli()
		}
		body.Masters[i] = rm
	}
	status := http.StatusOK
	switch {
	case s.shuttingDown.Load():
		body.Status, status = "shutting_down", http.StatusServiceUnavailable
	case !s.locker.QuorumAvailable():
		body.Status, status = "no_quorum", http.StatusServiceUnavailable
	}
	body.Ready = status == http.StatusOK
	writeJSONValue(w, status, &body)
}

// serveStats answers GET /v1/stats for the dashboard; see statsBody.
func (s *Server) serveStats(w http.ResponseWriter, _ *http.Request) {
	st := s.metrics.stats()
	writeJSONValue(w, http.StatusOK, &st)
}

func writeJSONValue(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // only plain structs, maps and strings: cannot happen
		writeError(w, http.StatusInternalServerError, codeInternal, "internal error")
		return
	}
	writeJSON(w, status, append(b, '\n'))
}
