package storesql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// handle is what statements run on: a *sql.DB, a *sql.Tx or a *sql.Conn.
// It is store.DBTX, the one exported name of this method set, which this
// package, below store, cannot import.
type handle interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Wrap adds the operation to a database error, as "store: op: err". When ctx
// is done, the context's error is wrapped too, so that errors.Is(err,
// context.Canceled) holds whatever the driver reported for the interrupted
// statement.
func Wrap(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("store: %s: %w (%w)", op, cerr, err)
	}
	return fmt.Errorf("store: %s: %w", op, err)
}

// QueryRows runs query on db and returns every row, each read by scan.
func QueryRows[T any](ctx context.Context, db handle, op, query string, args []any, scan func(*sql.Rows, *T) error) ([]T, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, Wrap(ctx, op, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := scan(rows, &v); err != nil {
			return nil, Wrap(ctx, op, err)
		}
		out = append(out, v)
	}
	return out, Wrap(ctx, op, rows.Err())
}

// Affected runs a statement that changes rows and returns how many it
// changed.
func Affected(ctx context.Context, db handle, op, query string, args ...any) (int64, error) {
	res, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, Wrap(ctx, op, err)
	}
	n, err := res.RowsAffected()
	return n, Wrap(ctx, op, err)
}

// Count runs a query of one integer and returns it; no row is an error.
func Count(ctx context.Context, db handle, op, query string, args ...any) (int64, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return 0, Wrap(ctx, op, err)
	}
	defer rows.Close()
	var n int64
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return 0, Wrap(ctx, op, err)
		}
		return 0, Wrap(ctx, op, sql.ErrNoRows)
	}
	if err := rows.Scan(&n); err != nil {
		return 0, Wrap(ctx, op, err)
	}
	return n, Wrap(ctx, op, rows.Close())
}

// IsNil reports whether db is nil, a typed nil pointer included.
func IsNil(db handle) bool {
	if db == nil {
		return true
	}
	v := reflect.ValueOf(db)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// freshBytesDrivers are the packages of the database/sql drivers known to
// return a []byte value for each column of each row in newly allocated
// memory, never in a buffer they reuse: pgx's stdlib decodes bytea into a
// new slice per row, in every version the module supports.
var freshBytesDrivers = []string{"github.com/jackc/pgx/v5/stdlib"}

// FreshBytes reports whether db is a *sql.DB whose driver is one of
// freshBytesDrivers. database/sql lets a driver reuse the memory of a []byte
// value once the next row is read, so with any other driver, a wrapped one
// included, a store copies what it keeps; with these it keeps a large
// body as the driver returned it, which saves the delivery of a body one of
// its copies.
func FreshBytes(db handle) (fresh bool) {
	d, ok := db.(*sql.DB)
	if !ok {
		return false
	}
	// A *sql.DB not made by sql.Open or sql.OpenDB has no driver, and
	// asking for it panics; a store does not touch the database when it is
	// made, so such a handle fails only when it is used, as before.
	defer func() {
		if recover() != nil {
			fresh = false
		}
	}()
	t := reflect.TypeOf(d.Driver())
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t != nil && slices.Contains(freshBytesDrivers, t.PkgPath())
}

// PgTime converts an instant to what PostgreSQL stores: UTC, microseconds;
// the zero time is now. The drivers disagree on sub-microsecond input (one
// truncates, the server rounds text), so the stores truncate before either
// sees it.
func PgTime(t time.Time) time.Time {
	if t.IsZero() {
		t = time.Now()
	}
	return t.UTC().Truncate(time.Microsecond)
}

// maxErrorLen bounds what one failure stores; broker errors can embed whole
// payloads.
const maxErrorLen = 4096

// CleanText makes an error message storable in a text column: valid UTF-8,
// no NUL bytes (PostgreSQL rejects both), at most 4,096 bytes.
func CleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) > maxErrorLen {
		cut := maxErrorLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}
