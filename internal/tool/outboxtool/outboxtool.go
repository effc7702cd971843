// Package outboxtool does to an outbox what the project's demo and tests
// need and a service never should, so that the store's own API does not
// offer it.
package outboxtool

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/relayer-go/relayer/internal/tables"
	"github.com/relayer-go/relayer/store"
)

// Reset empties the outbox of opts, its dead letters, leases and published
// pauses (the inbox stays): every pending message is lost. It is for demos
// and test environments that start each run from nothing, never for a live
// outbox.
func Reset(ctx context.Context, db *sql.DB, opts store.Tables) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	if opts.Schema == "" {
		opts.Schema = store.SchemaDefault
	}
	n := tables.Of(opts.Schema, opts.TablePrefix)
	if _, err := db.ExecContext(ctx, `TRUNCATE `+n.Outbox+`, `+n.Dead+`, `+n.Leases+`, `+n.Pauses); err != nil {
		return fmt.Errorf("reset the outbox %s: %w", opts.Label(), err)
	}
	return nil
}
