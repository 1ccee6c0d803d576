// Package orders is an example order service that places each order once
// per client request, with three lines of defence:
//
//  1. the idempotency record on redlockd (client.Idempotent): a retry of a
//     request gets the first answer, and the work runs once;
//  2. the fence: every row carries the fence of the attempt that wrote it,
//     and a change is refused when a later attempt's fence is already
//     there (the late write of an attempt whose lease ended);
//  3. a UNIQUE constraint on the request key: a second order for one
//     request is refused by the database itself, even after the record's
//     retention has passed, or outside redlockd's fault model.
package orders

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/redlockd/redlockd/client"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Schema is the orders table: one row per client request.
const Schema = `CREATE TABLE IF NOT EXISTS orders (
	id          INTEGER PRIMARY KEY,
	request_key TEXT NOT NULL UNIQUE,
	sku         TEXT NOT NULL,
	qty         INTEGER NOT NULL,
	status      TEXT NOT NULL DEFAULT 'placed',
	fence       INTEGER NOT NULL
)`

// Request is a client's order request.
type Request struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// Service places orders.
type Service struct {
	DB    *sql.DB
	Locks *client.Client
	// Options go to every idempotency record (lease, retention).
	Options []client.IdemOption
	// AfterCommit, when set, runs after an order's row is committed and
	// before the record is completed: the tests crash there.
	AfterCommit func()
	// Reconciled counts the take-overs that found the earlier attempt's
	// order and completed with it.
	Reconciled atomic.Int64
}

// Open opens (and creates) the SQLite database at path.
func Open(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", path)
	if err != nil {
		return nil, err
	}
	if _, err := db.Exec(Schema); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// Place places the order of request key (the client's Idempotency-Key)
// once, and returns the answer for the client: 201 with the order's id.
// A retry gets the same answer, whatever happened to the first attempt.
func (s *Service) Place(ctx context.Context, key string, req Request) (client.Answer, error) {
	body, err := json.Marshal(req) // this service's canonical form: its own encoding
	if err != nil {
		return client.Answer{}, err
	}
	return s.Locks.Idempotent(ctx, key, client.Fingerprint(body), func(ctx context.Context, a client.Attempt) (client.Answer, error) {
		if a.Takeover {
			// The earlier attempt's lease ended without an answer: it may
			// have committed. Look first.
			if id, ok, err := s.find(ctx, key); err != nil || ok {
				if ok {
					s.Reconciled.Add(1)
				}
				return created(id), err
			}
		}
		id, err := s.insert(ctx, key, req, a.Fence)
		if err != nil {
			return client.Answer{}, err
		}
		if s.AfterCommit != nil {
			s.AfterCommit()
		}
		return created(id), nil
	}, s.Options...)
}

func created(id int64) client.Answer {
	return client.Answer{Status: 201, Headers: map[string]string{"Content-Type": "application/json", "Location": "/orders/" + strconv.FormatInt(id, 10)},
		Body: []byte(fmt.Sprintf(`{"order_id":%d}`, id))}
}

// insert writes the order's row with the attempt's fence. A row already
// there for the request (the UNIQUE constraint) is the order: it is not
// placed twice.
func (s *Service) insert(ctx context.Context, key string, req Request, fence int64) (int64, error) {
	res, err := s.DB.ExecContext(ctx, `INSERT INTO orders (request_key, sku, qty, fence) VALUES (?, ?, ?, ?)`, key, req.SKU, req.Qty, fence)
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE {
		id, _, ferr := s.find(ctx, key)
		return id, ferr
	}
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

func (s *Service) find(ctx context.Context, key string) (int64, bool, error) {
	var id int64
	err := s.DB.QueryRowContext(ctx, `SELECT id FROM orders WHERE request_key = ?`, key).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return id, err == nil, err
}

// ErrStaleFence: a later attempt of the request already wrote the order.
var ErrStaleFence = errors.New("orders: a later attempt holds this order (stale fence)")

// SetStatus changes the order's status for the attempt with fence: the
// fence check and the write are one statement, so the late write of an
// attempt whose lease ended is refused once a later attempt wrote.
func (s *Service) SetStatus(ctx context.Context, key, status string, fence int64) error {
	res, err := s.DB.ExecContext(ctx, `UPDATE orders SET status = ?, fence = ? WHERE request_key = ? AND fence <= ?`, status, fence, key, fence)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrStaleFence
	}
	return nil
}
