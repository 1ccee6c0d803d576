package daemon

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/redlockd/redlockd/daemon/limits"
	"github.com/redlockd/redlockd/redlock"
	"github.com/redlockd/redlockd/redlock/idempotency"
)

// IdempotencyOptions turns on the idempotency actions.
type IdempotencyOptions struct {
	// Store keeps the records, on the masters of the Client behind the
	// Locker (redlock/idempotency.New).
	Store *idempotency.Store
	// Registerer takes the idempotency metrics (redlockd_idempotency_*);
	// nil keeps them unregistered.
	Registerer prometheus.Registerer
}

// idemServer is the Server's idempotency state: nil when not configured.
type idemServer struct {
	store     *idempotency.Store
	bodyLimit int64
	metrics   *idemMetrics
	// begun, when set (tests only), runs after the Store's Begin returned
	// and before the answer: where a caller that leaves is seen.
	begun func(ctx context.Context)
}

func newIdemServer(o *IdempotencyOptions) (*idemServer, error) {
	if o == nil || o.Store == nil {
		return nil, nil
	}
	m := newIdemMetrics()
	if o.Registerer != nil {
		if err := m.register(o.Registerer); err != nil {
			return nil, err
		}
	}
	return &idemServer{store: o.Store, bodyLimit: idemBodyLimit(o.Store), metrics: m}, nil
}

// idemData is data of an idempotency answer. Fields not set are left out.
type idemData struct {
	Action        string         `json:"action"`
	Key           string         `json:"key"`
	Outcome       string         `json:"outcome,omitempty"`
	Token         string         `json:"token,omitempty"`
	Fence         int64          `json:"fence,omitempty"`
	PreviousFence int64          `json:"previous_fence,omitempty"`
	Attempts      int64          `json:"attempts,omitempty"`
	ValidityMS    *int64         `json:"validity_ms,omitempty"`
	ExpireAt      int64          `json:"expire_at,omitempty"`
	RetryAfter    int64          `json:"retry_after,omitempty"`
	Answer        *idemAnswerOut `json:"answer,omitempty"`
	State         string         `json:"state,omitempty"`
	Fingerprint   string         `json:"fingerprint,omitempty"`
	StartedAtMS   int64          `json:"started_at_ms,omitempty"`
	CompletedAtMS int64          `json:"completed_at_ms,omitempty"`
	// RetentionLeft is in whole seconds (rounded down).
	RetentionLeft int64 `json:"retention_left,omitempty"`
	Completed     *bool `json:"completed,omitempty"`
	Aborted       *bool `json:"aborted,omitempty"`
	Extended      *bool `json:"extended,omitempty"`
}

// idemAnswerOut is a stored answer as the API returns it: the body in
// base64, so that it comes back byte for byte whatever it holds.
type idemAnswerOut struct {
	Status     int               `json:"status"`
	Headers    map[string]string `json:"headers,omitempty"`
	BodyBase64 string            `json:"body_base64"`
}

func answerOut(a *idempotency.Answer) *idemAnswerOut {
	if a == nil {
		return nil
	}
	return &idemAnswerOut{Status: a.Status, Headers: a.Headers, BodyBase64: base64.StdEncoding.EncodeToString(a.Body)}
}

type idemEnvelope struct {
	Ret         string    `json:"ret"`
	Data        *idemData `json:"data"`
	Msg         string    `json:"msg"`
	Code        string    `json:"code,omitempty"`
	RemainQuota int64     `json:"remain_quota"`
}

// Stable codes of the idempotency answers that are not 200.
const (
	codeIdemInProgress = "in_progress"          // 409
	codeIdemMismatch   = "fingerprint_mismatch" // 422
	codeIdemNotOwner   = "not_owner"            // 409
	codeIdemCompleted  = "already_completed"    // 409
)

// admitIdem charges an idempotency action to its account's quota and
// rate, or answers 429 and reports false. An idem_complete, idem_abort or
// idem_extend whose token is an attempt of the record (Store.Attempted,
// one quorum read) is never refused, as a lock's release and extend are
// not: it carries an attempt that was admitted to its end, and refusing it
// would lose the answer of work that ran (a retry after the lease runs it
// again), keep the lease and its max_locks slot, or end the lease under
// work that is running (another attempt could start beside it). It is
// counted while calls are left, and free once they are spent. With a
// token that is no attempt of the record it is refused as any call: past
// its limits, an account cannot send answers of up to the answer cap to
// every master for free. idem_begin and idem_get are refused as any call.
func (s *Server) admitIdem(ctx context.Context, w http.ResponseWriter, c *call, a idemAction, key, token string) bool {
	r, ok := c.limits.Admit(limits.Ordinary, c.start)
	if ok {
		return true
	}
	if a == idemComplete || a == idemAbort || a == idemExtend {
		if own, err := s.idem.store.Attempted(ctx, key, token); err == nil && own {
			return true
		}
	}
	s.refuse(w, c, r)
	return false
}

// serveIdempotency answers an idempotency action; serveLock has checked
// the method, the API key, the Content-Type and the body size.
func (s *Server) serveIdempotency(ctx context.Context, w http.ResponseWriter, c *call, a idemAction, body []byte) {
	c.action = actIdempotency
	req, berr := parseIdemRequest(body, a, &s.lim, s.idem.store)
	if berr != nil {
		s.fail(w, c, http.StatusBadRequest, resBadRequest, codeBadRequest, berr.msg)
		return
	}
	c.token = req.token
	key := idemKey(s.prefix, c.account, req.namespace, req.key)
	if !s.admitIdem(ctx, w, c, a, key, req.token) {
		return
	}
	d := &idemData{Action: a.String(), Key: req.key}
	var err error
	switch a {
	case idemBegin:
		err = s.idemBegin(ctx, w, c, &req, key, d)
	case idemComplete:
		c.limits.Releasing(idempotency.LeaseKey(key), req.token)
		err = s.idem.store.Complete(ctx, key, req.token, req.answer)
		s.idemLeaseEnded(c, key, req.token, err)
		if err == nil {
			s.idem.metrics.stored.Add(float64(req.answer.Size()))
			d.Completed = ptr(true)
			s.idemOK(w, c, d, http.StatusOK, "")
		}
	case idemAbort:
		c.limits.Releasing(idempotency.LeaseKey(key), req.token)
		if req.retryable {
			err = s.idem.store.Abort(ctx, key, req.token)
		} else {
			// A failure that must not be retried is stored like an
			// answer: every retry replays it.
			err = s.idem.store.Complete(ctx, key, req.token, req.answer)
		}
		s.idemLeaseEnded(c, key, req.token, err)
		if err == nil {
			d.Aborted = ptr(true)
			s.idemOK(w, c, d, http.StatusOK, "")
		}
	case idemGet:
		var rec idempotency.Record
		rec, err = s.idem.store.Get(ctx, key)
		if err == nil {
			fillRecord(d, &rec)
			s.idemOK(w, c, d, http.StatusOK, "")
		}
	case idemExtend:
		var until time.Time
		until, err = s.idem.store.Extend(ctx, key, req.token, req.lease)
		if err == nil {
			c.limits.Changed(idempotency.LeaseKey(key), req.token, limits.Extended)
		}
		if err == nil {
			d.Extended = ptr(true)
			setIdemValidity(d, until)
			s.idemOK(w, c, d, http.StatusOK, "")
		}
	}
	s.idem.metrics.requests.WithLabelValues(a.String(), idemResultLabel(d, err)).Inc()
	if err != nil {
		s.idemFailed(ctx, w, c, d, err)
	}
}

// idemBegin answers idem_begin: 200 started, expired_in_progress and
// completed; 409 in_progress; 422 fingerprint mismatch.
func (s *Server) idemBegin(ctx context.Context, w http.ResponseWriter, c *call, req *idemRequest, key string, d *idemData) error {
	res, refused, err := s.idemBeginLimited(ctx, w, c, req, key)
	if err != nil || refused {
		return err
	}
	if s.idem.begun != nil {
		s.idem.begun(ctx)
	}
	if res.Outcome == idempotency.Started && ctx.Err() != nil {
		// The caller went away before the answer, which alone carries the
		// token: nobody can complete this attempt, and its retries would
		// get 409 in_progress for the whole lease. Nothing ran under it,
		// so abort it (a takeover, ExpiredInProgress, is kept: it says
		// that an earlier attempt may have run part of the work).
		s.abortAbandoned(c, key, res.Token)
		s.lockerFailed(ctx, w, c, ctx.Err())
		return nil
	}
	d.Outcome, d.Attempts = res.Outcome.String(), res.Attempts
	m := s.idem.metrics
	switch res.Outcome {
	case idempotency.Started, idempotency.ExpiredInProgress:
		c.token = res.Token
		d.Token, d.Fence, d.PreviousFence = res.Token, res.Fence, res.PreviousFence
		setIdemValidity(d, res.ValidUntil)
		if res.Outcome == idempotency.ExpiredInProgress {
			m.takeovers.Inc()
		}
		s.idemOK(w, c, d, http.StatusOK, "")
	case idempotency.Completed:
		m.replays.Inc()
		fillRecord(d, &res.Record)
		// Every replay of the record is the same bytes.
		d.State, d.RetentionLeft = "", 0
		s.idemOK(w, c, d, http.StatusOK, "")
	case idempotency.InProgress:
		if !res.Record.StartedAt.IsZero() {
			m.inProgressAge.Observe(time.Since(res.Record.StartedAt).Seconds())
		}
		d.Fence = res.Record.Fence
		d.RetryAfter = max(int64((res.RetryAfter+time.Second-1)/time.Second), 1)
		w.Header().Set("Retry-After", strconv.FormatInt(d.RetryAfter, 10))
		s.idemOK(w, c, d, http.StatusConflict, "another attempt of this key is in progress; retry after retry_after seconds")
	case idempotency.Mismatch:
		m.conflicts.Inc()
		s.idemOK(w, c, d, http.StatusUnprocessableEntity, "this key was used with another request (fingerprint mismatch); use a new key for a new request")
	}
	return nil
}

// abortAbandoned aborts the attempt key began with token for a caller
// that went away before its answer, on a context of its own
// (abandonedReleaseTimeout), as releaseAbandoned releases a lock.
func (s *Server) abortAbandoned(c *call, key, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), abandonedReleaseTimeout)
	defer cancel()
	c.limits.Releasing(idempotency.LeaseKey(key), token)
	err := s.idem.store.Abort(ctx, key, token)
	s.idemLeaseEnded(c, key, token, err)
	s.log.Info("idempotency attempt begun for a caller that went away: aborted", zap.String("key", key), zap.Error(err))
}

// idemLeaseEnded counts the end of a processing lease for max_locks, as a
// release is counted (lock.go): Complete and Abort release the lease when
// they succeed, and a token that is no longer the owner holds no lease.
// It ends the Releasing that preceded them.
func (s *Server) idemLeaseEnded(c *call, key, token string, err error) {
	if err == nil || errors.Is(err, idempotency.ErrNotOwner) {
		c.limits.Changed(idempotency.LeaseKey(key), token, limits.Released)
		return
	}
	c.limits.ReleaseEnded(idempotency.LeaseKey(key), token)
}

// idemBeginLimited runs the Store's Begin, counting the processing lease
// against the account's max_locks as an acquire is (lock.go): a slot is
// reserved before the lease is taken and ended with the lease's token, or
// with none when no lease was kept. At the limit, a record that answers
// without a lease still does (a completed record replays, another
// fingerprint is refused) from one quorum read; a begin that would take a
// lease is refused 429 too_many_locks (refused true, answered here).
func (s *Server) idemBeginLimited(ctx context.Context, w http.ResponseWriter, c *call, req *idemRequest, key string) (res idempotency.BeginResult, refused bool, err error) {
	breq := idempotency.BeginRequest{Key: key, Fingerprint: req.fingerprint, Lease: req.lease, Retention: req.retention,
		Budget: idempotency.Budget{Set: idemBudgetKey(s.prefix, c.account), MaxBytes: c.idemMaxBytes}}
	r, ok := c.limits.Reserve(1)
	if ok {
		res, err = s.idem.store.Begin(ctx, breq)
		token := ""
		if err == nil && (res.Outcome == idempotency.Started || res.Outcome == idempotency.ExpiredInProgress) {
			token = res.Token
		}
		c.limits.Done(idempotency.LeaseKey(key), token)
		return res, false, err
	}
	rec, err := s.idem.store.Get(ctx, key)
	switch {
	case err != nil:
		return res, false, err
	case rec.State != idempotency.StateAbsent && rec.Fingerprint != req.fingerprint:
		return idempotency.BeginResult{Outcome: idempotency.Mismatch, Record: rec, Attempts: rec.Attempts}, false, nil
	case rec.State == idempotency.StateCompleted:
		return idempotency.BeginResult{Outcome: idempotency.Completed, Record: rec, Attempts: rec.Attempts}, false, nil
	case rec.State == idempotency.StateInProgress:
		// A retry of an attempt whose lease is held takes no lease: Begin
		// would answer in_progress. Only a take-over (the lease ended)
		// needs a slot of max_locks.
		if st, err := s.locker.Status(ctx, idempotency.LeaseKey(key)); err == nil && st.Held {
			return idempotency.BeginResult{Outcome: idempotency.InProgress, Record: rec, Attempts: rec.Attempts, RetryAfter: st.Validity}, false, nil
		}
	}
	s.refund(c)
	s.refuse(w, c, r)
	return res, true, nil
}

// idemFailed answers the errors of the Store.
func (s *Server) idemFailed(ctx context.Context, w http.ResponseWriter, c *call, d *idemData, err error) {
	switch {
	case errors.As(err, new(*idempotency.BudgetError)):
		var be *idempotency.BudgetError
		errors.As(err, &be)
		// Refused before anything was kept: not counted, as a 429 of the
		// account's limits is not.
		s.refund(c)
		retry := min(max(be.RetryAfter, time.Second), maxRetryAfter)
		w.Header().Set("Retry-After", strconv.FormatInt(int64((retry+time.Second-1)/time.Second), 10))
		s.fail(w, c, http.StatusTooManyRequests, resRecordsBudgetFull, codeRecordsBudgetFull,
			fmt.Sprintf("the account's idempotency records take up its max_idempotency_bytes (%d bytes per master): no new record until some end (the oldest in %v); retry after Retry-After, or raise the limit",
				be.MaxBytes, be.RetryAfter.Round(time.Second)))
	case errors.Is(err, idempotency.ErrAnswerTooLarge):
		s.fail(w, c, http.StatusRequestEntityTooLarge, resTooLarge, codeTooLarge, "answer: "+errMsg(err))
	case errors.Is(err, idempotency.ErrInvalid):
		s.fail(w, c, http.StatusBadRequest, resBadRequest, codeBadRequest, errMsg(err))
	case errors.Is(err, idempotency.ErrNotOwner):
		d.Outcome = ""
		s.idemOK(w, c, d, http.StatusConflict, errMsg(err))
	case errors.Is(err, idempotency.ErrAlreadyCompleted):
		d.Outcome = "already_completed"
		s.idemOK(w, c, d, http.StatusConflict, errMsg(err))
	case s.idemQuorumFailed(ctx, w, c, err):
	case s.lockerFailed(ctx, w, c, err):
	default:
		s.internal(w, c, err)
	}
}

// idemQuorumFailed answers a record action that heard no quorum of masters
// counting for records (idempotency.QuorumError): 503 with every master's
// reason and, when a quorum's return is known (repaired masters waiting
// out the max retention), when, as Retry-After (at most maxRetryAfter).
// The lock's own quorum failures (the lease) go to lockerFailed.
func (s *Server) idemQuorumFailed(ctx context.Context, w http.ResponseWriter, c *call, err error) bool {
	var qe *idempotency.QuorumError
	if !errors.As(err, &qe) || ctx.Err() != nil {
		return false
	}
	c.err = err
	msg := fmt.Sprintf("idempotency records: no quorum of masters counting for records (%d of %d needed; %d wrote or read the record, %d not counted: %v)",
		qe.Quorum, qe.Masters, qe.Done, len(qe.Failures), errors.Join(qe.Failures...))
	retry := s.outage.backoff(time.Now())
	// Masters that failed otherwise (down, paused, too slow) may come back
	// at any moment and make the quorum sooner than the retention waits.
	others := 0
	for _, f := range qe.Failures {
		var rw *idempotency.RetentionWaitError
		if !errors.As(f, &rw) {
			others++
		}
	}
	if qe.ReturnKnown {
		d := max(qe.Return.Round(time.Second), time.Second)
		sooner := ""
		if others > 0 {
			sooner = fmt.Sprintf(", or sooner when the %d master(s) down or not answering come back", others)
			retry = min(retry, d, maxRetryAfter)
		} else {
			retry = min(d, maxRetryAfter)
		}
		msg += fmt.Sprintf("; a quorum counts for records again in %v%s; retry in %d s", d, sooner, retry/time.Second)
	} else {
		msg += "; no time is known for a quorum to count for records again; retry later"
	}
	w.Header().Set("Retry-After", strconv.FormatInt(int64((retry+time.Second-1)/time.Second), 10))
	s.fail(w, c, http.StatusServiceUnavailable, resQuorumUnavailable, codeQuorum, strings.ReplaceAll(msg, "\n", "; "))
	return true
}

// errMsg is err's message without the package prefix.
func errMsg(err error) string {
	msg := err.Error()
	if p := "idempotency: "; len(msg) > len(p) && msg[:len(p)] == p {
		msg = msg[len(p):]
	}
	return msg
}

// idemOK writes an answered idempotency action: ret "ok" with 200, else
// ret "err" with the status's code and the data that explains it.
func (s *Server) idemOK(w http.ResponseWriter, c *call, d *idemData, status int, msg string) {
	s.outage.end()
	env := idemEnvelope{Ret: "ok", Data: d, Msg: quotaMsg(msg, c), RemainQuota: c.limits.Remain()}
	c.result, c.status = resIdemAnswered, status
	if status != http.StatusOK {
		c.result = resIdemConflict
		env.Ret, env.Msg = "err", msg
		switch {
		case status == http.StatusUnprocessableEntity:
			env.Code = codeIdemMismatch
		case d.Outcome == "":
			env.Code = codeIdemNotOwner
		case d.Outcome == codeIdemCompleted:
			d.Outcome = ""
			env.Code = codeIdemCompleted
		default:
			env.Code = codeIdemInProgress
		}
	}
	b, err := json.Marshal(&env)
	if err != nil {
		s.internal(w, c, err)
		return
	}
	writeJSON(w, status, append(b, '\n'))
}

func setIdemValidity(d *idemData, until time.Time) {
	now := time.Now()
	v := max(until.Sub(now), 0)
	ms := v.Milliseconds()
	d.ValidityMS, d.ExpireAt = &ms, now.Add(v).Unix()
}

func fillRecord(d *idemData, r *idempotency.Record) {
	d.State, d.Fingerprint, d.Fence, d.Attempts = r.State.String(), r.Fingerprint, r.Fence, r.Attempts
	if r.State == idempotency.StateAbsent {
		return
	}
	d.StartedAtMS = r.StartedAt.UnixMilli()
	if !r.CompletedAt.IsZero() {
		d.CompletedAtMS = r.CompletedAt.UnixMilli()
	}
	d.RetentionLeft = int64(r.TTL / time.Second)
	d.Answer = answerOut(r.Answer)
}

func ptr[T any](v T) *T { return &v }

// idemResultLabel is the result label of redlockd_idempotency_requests_total.
func idemResultLabel(d *idemData, err error) string {
	switch {
	case err == nil && d.Outcome != "":
		return d.Outcome
	case err == nil:
		return "ok"
	case errors.Is(err, idempotency.ErrNotOwner):
		return "not_owner"
	case errors.Is(err, idempotency.ErrAlreadyCompleted):
		return "already_completed"
	case errors.Is(err, idempotency.ErrInvalid), errors.Is(err, idempotency.ErrAnswerTooLarge):
		return "bad_request"
	case errors.Is(err, redlock.ErrQuorumUnavailable):
		return "quorum_unavailable"
	}
	return "error"
}
