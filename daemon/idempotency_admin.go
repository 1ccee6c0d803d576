package daemon

import (
	"errors"
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/redlockd/redlockd/redlock"
	"github.com/redlockd/redlockd/redlock/idempotency"
)

// listedRecord is one record in the answer of GET /admin/idempotency. Its
// owner token is never shown.
type listedRecord struct {
	Namespace     string `json:"namespace"`
	Key           string `json:"key"`
	State         string `json:"state"`
	Fingerprint   string `json:"fingerprint"`
	Fence         int64  `json:"fence"`
	Attempts      int64  `json:"attempts"`
	StartedAtMS   int64  `json:"started_at_ms"`
	CompletedAtMS int64  `json:"completed_at_ms,omitempty"`
	RetentionLeft int64  `json:"retention_left"`
	AnswerStatus  int    `json:"answer_status,omitempty"`
	AnswerBytes   int    `json:"answer_bytes,omitempty"`
}

type recordList struct {
	Account    string         `json:"account"`
	Namespace  *string        `json:"namespace,omitempty"`
	Records    []listedRecord `json:"records"`
	NextCursor string         `json:"next_cursor"`
}

// serveIdemList answers GET /admin/idempotency?account=A[&namespace=N]
// [&cursor=C][&limit=L]: one page of the account's idempotency records
// (idempotency.Store.List: the masters are scanned one after another, each
// record confirmed by a quorum read). An empty next_cursor ends the
// listing; a page may be empty before it ends.
func (s *Server) serveIdemList(w http.ResponseWriter, r *http.Request) {
	if s.idem == nil {
		writeError(w, http.StatusNotFound, codeNotFound, "idempotency records are not enabled on this daemon")
		return
	}
	q, ok := s.parseListQuery(w, r, idempotency.MaxListCount)
	if !ok {
		return
	}
	account := q.account
	prefix := q.prefix(s.prefix + "idem:")
	ans := recordList{Account: account, Namespace: q.namespace, Records: []listedRecord{}}
	// The same gate as the lock listing: operator listings never starve
	// the lock path.
	if ok, why := s.listings.enter(account); !ok {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, codeTooManyListings, why)
		return
	}
	defer s.listings.leave(account)
	page, err := s.idem.store.List(r.Context(), prefix, q.cursor, q.limit)
	switch {
	case err == nil:
	case errors.Is(err, idempotency.ErrInvalid):
		// "cursor: …", as GET /admin/locks says it.
		writeError(w, http.StatusBadRequest, codeBadRequest, strings.TrimPrefix(errMsg(err), "invalid argument: "))
		return
	case r.Context().Err() != nil:
		writeError(w, statusClientClosed, codeCancelled, "request cancelled")
		return
	case errors.Is(err, redlock.ErrQuorumUnavailable):
		s.log.Warn("idempotency listing: no quorum", zap.Error(err))
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, codeQuorum, "cannot list the records: no quorum of masters counts for records; retry with the same cursor")
		return
	default:
		s.log.Error("idempotency listing", zap.Error(err))
		writeError(w, http.StatusInternalServerError, codeInternal, "internal error; it has been logged")
		return
	}
	for _, lr := range page.Records {
		// The record's key is idemKey's: decoded as a lock key's parts.
		rest, ok := strings.CutPrefix(lr.Key, s.prefix+"idem:")
		if !ok {
			continue
		}
		acct, ns, key, err := decodeRedisKey(s.prefix, s.prefix+lockSpace+rest)
		if err != nil || acct != account {
			continue
		}
		rec := lr.Record
		l := listedRecord{Namespace: ns, Key: key, State: rec.State.String(), Fingerprint: rec.Fingerprint, Fence: rec.Fence,
			Attempts: rec.Attempts, StartedAtMS: rec.StartedAt.UnixMilli(), RetentionLeft: int64(rec.TTL.Seconds())}
		if !rec.CompletedAt.IsZero() {
			l.CompletedAtMS = rec.CompletedAt.UnixMilli()
		}
		if rec.Answer != nil {
			l.AnswerStatus, l.AnswerBytes = rec.Answer.Status, rec.AnswerBytes()
		}
		ans.Records = append(ans.Records, l)
	}
	ans.NextCursor = page.Cursor
	writeJSONValue(w, http.StatusOK, &ans)
}
