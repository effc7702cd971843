package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// Sentinel errors. Each is wrapped with details; test with [errors.Is].
var (
	// ErrInvalidOptions is returned by [Options.Validate] and [New] for a bad schema
	// or table prefix.
	ErrInvalidOptions = errors.New("store: invalid options")
	// ErrNilDB is returned when a nil database handle is passed.
	ErrNilDB = errors.New("store: nil database handle")
	// ErrInvalidArgument is returned for a bad argument to a store method, such as
	// a nonpositive limit or a nil claim token.
	ErrInvalidArgument = errors.New("store: invalid argument")
	// ErrInvalidMessage is returned by [Store.Insert] for a message that cannot be
	// stored; nothing of the batch is written.
	ErrInvalidMessage = errors.New("store: invalid message")
	// ErrNeedsTransaction is returned by the take methods ([Store.TakeIDs],
	// [Store.TakeNextUnordered]) on a store not bound to a *sql.Tx: outside a
	// transaction their DELETE would commit before the rows were sent.
	ErrNeedsTransaction = errors.New("store: must run inside a transaction")
	// ErrCorruptRow is returned when a stored row cannot be read back, such as a
	// headers column that is not in the binary header format. The error is a
	// *[RowError] naming the row.
	ErrCorruptRow = errors.New("store: corrupt row")
)

// RowError reports a stored row that could not be read back. It matches
// [ErrCorruptRow] and the underlying cause (for example headers.ErrTruncated).
type RowError struct {
	ID     uuid.UUID
	Column string
	Err    error
}

func (e *RowError) Error() string {
	return fmt.Sprintf("store: corrupt row %s: column %s: %v", e.ID, e.Column, e.Err)
}

// Unwrap returns ErrCorruptRow and the cause.
func (e *RowError) Unwrap() []error { return []error{ErrCorruptRow, e.Err} }

// wrap adds the operation to a database error. When ctx is done, the context's
// error is wrapped too, so that errors.Is(err, context.Canceled) holds whatever
// the driver reported for the interrupted statement.
func wrap(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("store: %s: %w (%w)", op, cerr, err)
	}
	return fmt.Errorf("store: %s: %w", op, err)
}
