package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/storesql"
)

// Sentinel errors. Each is wrapped with details; test with [errors.Is].
var (
	// ErrInvalidOptions is returned by [Tables.Validate] and [New] for a bad schema
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

// wrap adds the operation to a database error (see storesql.Wrap).
func wrap(ctx context.Context, op string, err error) error { return storesql.Wrap(ctx, op, err) }
