package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/storewrite"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// CheckSchema and the writers' check (internal/storewrite) tell a current schema from one missing a
// migration (or every one) and from one a newer release migrated, on every
// driver, and say how to migrate.
func TestCheckSchema(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		exec := func(ctx context.Context, q string, args ...any) error {
			_, err := b.db.ExecContext(ctx, q, args...)
			return err
		}
		check := func(st *workerstore.Store) (int, error, error, error) {
			v, err := st.CheckSchema(ctx)
			return v, err, statementsOf(t, st.Tables()).CheckSchema(ctx, exec, false), statementsOf(t, st.Tables()).CheckSchema(ctx, exec, true)
		}

		v, err, with, strict := check(b.store)
		if v != store.SchemaVersion || err != nil || with != nil || strict != nil {
			t.Errorf("migrated: %d, %v, %v, %v; want version %d, no error", v, err, with, strict, store.SchemaVersion)
		}

		// No tables at all, then only the first migration (an upgrade
		// whose migrations were not run), applied as a migration tool would.
		opts := store.Tables{Schema: b.opts.Schema, TablePrefix: "old_"}
		old, err := workerstore.New(b.db, opts)
		must(t, err)
		for _, step := range []int{0, 1} {
			if step > 0 {
				steps, err := store.Migrations(opts)
				must(t, err)
				_, err = b.db.ExecContext(ctx, steps[0].SQL)
				must(t, err)
			}
			_, err, with, strict = check(old)
			for _, e := range []error{err, with, strict} {
				if !errors.Is(e, store.ErrSchemaOutdated) || !strings.Contains(e.Error(), "relayer migrate --database-url URL --schema "+opts.Schema+" --prefix old_") {
					t.Errorf("after %d migrations: %v, want ErrSchemaOutdated saying how to migrate", step, e)
				}
			}
		}
		if _, err := store.Migrate(ctx, b.db, opts); err != nil {
			t.Fatal(err)
		}
		if _, err := old.CheckSchema(ctx); err != nil {
			t.Errorf("after Migrate: %v", err)
		}

		// A newer release recorded a migration this one does not know.
		_, err = b.db.ExecContext(ctx, `INSERT INTO "`+b.opts.Schema+`".orders_relayer_migrations (version, name) VALUES ($1, 'from the future')`, store.SchemaVersion+1)
		must(t, err)
		v, err, with, strict = check(b.store)
		if v != store.SchemaVersion+1 || !errors.Is(err, store.ErrSchemaNewer) || with != nil || !errors.Is(strict, store.ErrSchemaNewer) {
			t.Errorf("newer: %d, %v, %v, %v; want version %d, ErrSchemaNewer from CheckSchema and the strict check only",
				v, err, with, strict, store.SchemaVersion+1)
		}
	})
}

// SchemaVersion is the newest migration step.
func TestSchemaVersionIsTheNewestStep(t *testing.T) {
	steps, err := store.Migrations(store.Tables{})
	must(t, err)
	if last := steps[len(steps)-1].Version; last != store.SchemaVersion {
		t.Errorf("the newest step is %d, SchemaVersion %d", last, store.SchemaVersion)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A schema that records every migration but lacks an object they made,
// dropped by hand, is refused by CheckSchema and the writers' check (internal/storewrite), naming
// what is missing; the script SchemaSQL prints makes it again.
func TestCheckSchemaSeesMissingObjects(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		exec := func(ctx context.Context, q string, args ...any) error {
			_, err := b.db.ExecContext(ctx, q, args...)
			return err
		}
		schema := `"` + b.opts.Schema + `".`
		for _, tc := range []struct{ drop, want string }{
			{`ALTER TABLE ` + schema + `orders_outbox ALTER COLUMN xact_id DROP DEFAULT`, "the default of xact_id"},
			{`DROP INDEX ` + schema + `orders_outbox_held_keys_idx`, "the index orders_outbox_held_keys_idx"},
			{`DROP INDEX ` + schema + `orders_outbox_lane_xact_idx`, "the index orders_outbox_lane_xact_idx"},
			{`DROP INDEX ` + schema + `orders_outbox_lane_pending_idx`, "the index orders_outbox_lane_pending_idx"},
		} {
			_, err := b.db.ExecContext(ctx, tc.drop)
			must(t, err)
			_, err = b.store.CheckSchema(ctx)
			with := statementsOf(t, b.store.Tables()).CheckSchema(ctx, exec, false)
			for _, e := range []error{err, with} {
				if !errors.Is(e, store.ErrSchemaIncomplete) || !strings.Contains(e.Error(), tc.want) ||
					!strings.Contains(e.Error(), "relayer schema --schema "+b.opts.Schema+" --prefix orders_") {
					t.Errorf("after %s: %v, want ErrSchemaIncomplete naming %s and the repair", tc.drop, e, tc.want)
				}
			}
			script, err := store.SchemaSQL(b.opts)
			must(t, err)
			_, err = b.db.ExecContext(ctx, script)
			must(t, err)
			if _, err := b.store.CheckSchema(ctx); err != nil {
				t.Errorf("after the schema script ran again: %v", err)
			}
		}
	})
}

// The first to check records the lane count; another count is refused,
// naming both, through either check; the count changes only on an outbox
// drained of ordered rows and live ordered workers.
func TestLaneCountIsRecordedAndChecked(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		if _, recorded, err := b.store.LaneCount(ctx); err != nil || recorded {
			t.Fatalf("LaneCount of a new outbox = recorded %t, %v; want none", recorded, err)
		}
		must(t, b.store.CheckLaneCount(ctx, 32))
		if n, recorded, err := b.store.LaneCount(ctx); n != 32 || !recorded || err != nil {
			t.Fatalf("LaneCount = %d, %t, %v; want 32 recorded", n, recorded, err)
		}
		mismatch := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, store.ErrLaneCountMismatch) || !strings.Contains(err.Error(), "records 32 lanes") ||
				!strings.Contains(err.Error(), "configured with 64") {
				t.Errorf("%s: %v, want ErrLaneCountMismatch naming 32 and 64", what, err)
			}
		}
		mismatch("CheckLaneCount", b.store.CheckLaneCount(ctx, 64))
		tx, st := b.begin(t, nil)
		exec := func(ctx context.Context, q string, args ...any) error {
			_, err := tx.ExecContext(ctx, q, args...)
			return err
		}
		mismatch("the writers' lane count check", statementsOf(t, st.Tables()).CheckLaneCount(ctx, exec, 64))
		_ = tx.Rollback()
		tx, st = b.begin(t, nil)
		exec = func(ctx context.Context, q string, args ...any) error {
			_, err := tx.ExecContext(ctx, q, args...)
			return err
		}
		must(t, statementsOf(t, st.Tables()).CheckLaneCount(ctx, exec, 32))
		_ = tx.Rollback()

		// Not drained: an ordered row, then a live ordered worker.
		row := b.ordered(t, "k", 32)
		b.insert(t, row)
		if err := b.store.SetLaneCount(ctx, 64); !errors.Is(err, store.ErrNotDrained) || !strings.Contains(err.Error(), "1 ordered rows") {
			t.Errorf("SetLaneCount with an ordered row = %v, want ErrNotDrained", err)
		}
		_, err := b.db.ExecContext(ctx, `DELETE FROM "`+b.opts.Schema+`".orders_outbox`)
		must(t, err)
		if _, _, err := b.store.AcquireLease(ctx, workerstore.Lease{Name: workerstore.MemberLeaseName("w1"), Owner: "w1", Token: uuid.New()}, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := b.store.SetLaneCount(ctx, 64); !errors.Is(err, store.ErrNotDrained) || !strings.Contains(err.Error(), "1 live ordered workers") {
			t.Errorf("SetLaneCount with a live worker = %v, want ErrNotDrained", err)
		}
		_, err = b.db.ExecContext(ctx, `DELETE FROM "`+b.opts.Schema+`".orders_relayer_leases`)
		must(t, err)
		must(t, b.store.SetLaneCount(ctx, 64))
		must(t, b.store.CheckLaneCount(ctx, 64))
		if err := b.store.CheckLaneCount(ctx, 32); !errors.Is(err, store.ErrLaneCountMismatch) {
			t.Errorf("the old count after the change: %v, want ErrLaneCountMismatch", err)
		}
	})
}

// An outbox whose schema does not exist is reported as such, by
// CheckSchema and the writers' check (internal/storewrite), with the command that creates it, and
// not as a schema older than the release; the error still wraps
// ErrSchemaOutdated, whose remedy it shares.
func TestCheckSchemaNamesAMissingSchema(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		exec := func(ctx context.Context, q string, args ...any) error {
			_, err := b.db.ExecContext(ctx, q, args...)
			return err
		}
		opts := store.Tables{Schema: b.opts.Schema + "_none"}
		st, err := workerstore.New(b.db, opts)
		must(t, err)
		_, err = st.CheckSchema(ctx)
		for _, e := range []error{err, statementsOf(t, st.Tables()).CheckSchema(ctx, exec, false), statementsOf(t, st.Tables()).CheckSchema(ctx, exec, true)} {
			want := "schema " + opts.Schema + " does not exist; run `relayer migrate --database-url URL --schema " + opts.Schema + "`"
			if !errors.Is(e, store.ErrSchemaOutdated) || !strings.Contains(e.Error(), want) || strings.Contains(e.Error(), "older") {
				t.Errorf("a schema that does not exist: %v; want %q, wrapping ErrSchemaOutdated, without \"older\"", e, want)
			}
		}
		t.Cleanup(func() {
			_, _ = b.db.ExecContext(context.Background(), `DROP SCHEMA IF EXISTS "`+opts.Schema+`" CASCADE`)
		})
		if _, err := store.Migrate(ctx, b.db, opts); err != nil {
			t.Fatal(err)
		}
		if _, err := st.CheckSchema(ctx); err != nil {
			t.Errorf("after Migrate: %v", err)
		}
	})
}

// statementsOf returns the writer statements of tables, as enlist runs
// them inside its callers' transactions.
func statementsOf(t *testing.T, tables store.Tables) storewrite.Statements {
	t.Helper()
	stmts, err := storewrite.For(tables.Schema, tables.TablePrefix)
	if err != nil {
		t.Fatal(err)
	}
	return stmts
}
