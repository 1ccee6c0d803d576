package client

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Sentinel errors, matched with errors.Is. Each *Error matches at most one.
var (
	// ErrLockHeld: acquire answered acquired:false, the lock belongs to
	// another owner. The *Error's RetryAfter is the holder's remaining time.
	ErrLockHeld = errors.New("redlockd: lock is held by another owner")
	// ErrNotHeld: extend or release found that the token does not hold the
	// lock (it expired, was released, or another owner holds it).
	ErrNotHeld = errors.New("redlockd: lock not held by this token")
	// ErrUnavailable: HTTP 503, no quorum of masters could vote; or the
	// daemon could not be reached. Retrying later may succeed.
	ErrUnavailable = errors.New("redlockd: service unavailable")
	// ErrUnauthorized: HTTP 401, the API key is missing or unknown.
	ErrUnauthorized = errors.New("redlockd: unauthorized")
	// ErrInvalid: HTTP 400 (and 413, 415), the request was refused as bad
	// input; the *Error's Msg is the server's message naming the field. Also
	// returned without a request for arguments the API cannot carry.
	ErrInvalid = errors.New("redlockd: invalid request")
	// ErrLost matches Lease.Err once the lock is lost; the cause is joined.
	ErrLost = errors.New("redlockd: lock lost")
	// ErrReleased matches Lease.Err after Release.
	ErrReleased = errors.New("redlockd: lock released")
)

// Error is an answer of the API that is not a success: an HTTP error
// status, or a 200 whose outcome was negative (acquired:false,
// extended:false, released:false).
type Error struct {
	// Kind is the sentinel the error matches: ErrLockHeld, ErrNotHeld,
	// ErrUnavailable, ErrUnauthorized, ErrInvalid, or nil when the answer
	// fits none of them (500, 404, an unreadable body).
	Kind error
	// Action is the request's action: acquire, extend, release or status.
	Action string
	// Status is the HTTP status code; 0 when no answer was received.
	Status int
	// Code is the envelope's code (bad_request, unauthorized,
	// quorum_unavailable, …); "" on a 200.
	Code string
	// Msg is the server's message (or the transport error's text).
	Msg string
	// RetryAfter is, for ErrLockHeld, the holder's remaining time; for
	// ErrUnavailable, the Retry-After header. 0 when not given.
	RetryAfter time.Duration
	// Err is the underlying transport or decoding error, if any.
	Err error
}

func (e *Error) Error() string {
	s := "redlockd: " + e.Action
	switch {
	case e.Status == 0:
		s += ": no answer"
	case e.Status != http.StatusOK:
		s += fmt.Sprintf(": HTTP %d", e.Status)
	}
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Msg != "" {
		s += ": " + e.Msg
	} else if e.Kind != nil {
		s += ": " + e.Kind.Error()
	}
	return s
}

// Is reports whether target is e.Kind.
func (e *Error) Is(target error) bool { return e.Kind != nil && target == e.Kind }

// Unwrap returns the transport or decoding error, if any.
func (e *Error) Unwrap() error { return e.Err }

// kindOf maps an HTTP error status to its sentinel.
func kindOf(status int) error {
	switch status {
	case http.StatusServiceUnavailable:
		return ErrUnavailable
	case http.StatusUnauthorized:
		return ErrUnauthorized
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		return ErrInvalid
	}
	return nil
}
