// Package storewrite is the outbox store's seam for the library's own
// writers: the statements enlist runs inside its callers' transactions,
// through a function that executes one statement, whatever the driver.
// They are not part of package store's stable surface; package store
// provides them (For) when it is initialized, so this package imports
// nothing of it.
package storewrite

import (
	"context"

	"github.com/relayer-go/relayer"
)

// ExecFunc runs one statement with its arguments and reports whether it
// succeeded.
type ExecFunc func(ctx context.Context, query string, args ...any) error

// Statements are one outbox's writer statements, each run through an
// ExecFunc, as one statement, on the caller's transaction.
type Statements struct {
	// Schema is the tables' schema, the default applied.
	Schema string
	// Insert validates msgs and writes them; the error wraps
	// store.ErrInvalidMessage when one is invalid, and nothing is written.
	// A zero CreatedAt is set to the current time.
	Insert func(ctx context.Context, exec ExecFunc, msgs []relayer.Message) error
	// CheckSchema fails, and so aborts the transaction, when the outbox's
	// tables are missing or outdated (store.ErrSchemaOutdated and its
	// kin), or newer than this release when refuseNewer is set
	// (store.ErrSchemaNewer).
	CheckSchema func(ctx context.Context, exec ExecFunc, refuseNewer bool) error
	// CheckLaneCount records lanes as the outbox's lane count when none is
	// recorded, and fails on another recorded count
	// (store.ErrLaneCountMismatch).
	CheckLaneCount func(ctx context.Context, exec ExecFunc, lanes int) error
}

// For returns the statements of the outbox tables in schema whose names
// start with prefix, validating both (store.ErrInvalidOptions). Package
// store sets it when it is initialized: import store (every writer does)
// before calling it.
var For func(schema, prefix string) (Statements, error)
