package store_test

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		applied, err := store.Migrate(context.Background(), b.db, b.opts)
		if err != nil {
			t.Fatalf("second Migrate: %v", err)
		}
		if len(applied) != 0 {
			t.Errorf("second Migrate applied %v, want nothing", applied)
		}
		var versions []int
		rows, err := b.db.Query(`SELECT version FROM "` + b.opts.Schema + `"."` + b.opts.TablePrefix + `relayer_migrations" ORDER BY version`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			versions = append(versions, v)
		}
		migrations, _ := store.Migrations(b.opts)
		if len(versions) != len(migrations) {
			t.Errorf("recorded versions %v, want one per step (%d)", versions, len(migrations))
		}
	})
}

func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, "pgx")
	schema := testdb.NewSchema(t)
	// A schema that does not exist yet, migrated by several processes at once,
	// some for another outbox in the same schema.
	fresh := schema + "_new"
	t.Cleanup(func() { db.Exec(`DROP SCHEMA IF EXISTS "` + fresh + `" CASCADE`) })
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	totals := make(chan int, 8)
	for i := range 8 {
		wg.Go(func() {
			opts := store.Tables{Schema: fresh, TablePrefix: []string{"a_", "b_"}[i%2]}
			applied, err := store.Migrate(context.Background(), db, opts)
			errs <- err
			totals <- len(applied)
		})
	}
	wg.Wait()
	close(errs)
	close(totals)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent Migrate: %v", err)
		}
	}
	sum := 0
	for n := range totals {
		sum += n
	}
	steps, _ := store.Migrations(store.Tables{})
	if sum != 2*len(steps) {
		t.Errorf("steps applied across all runs = %d, want each step once per outbox (%d)", sum, 2*len(steps))
	}
}

// TestSchemaSQL applies the exported script the way a migration tool would and
// checks that Migrate afterwards sees every step as applied.
func TestSchemaSQL(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		opts := store.Tables{Schema: b.opts.Schema, TablePrefix: "tool_"}
		script, err := store.SchemaSQL(opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"tool_outbox", "tool_dead", "tool_relayer_leases", "tool_inbox", "tool_relayer_migrations"} {
			if !strings.Contains(script, `"`+name+`"`) {
				t.Errorf("script lacks table %s", name)
			}
		}
		execScript(t, b.db, script)
		execScript(t, b.db, script) // idempotent
		applied, err := store.Migrate(context.Background(), b.db, opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(applied) != 0 {
			t.Errorf("Migrate after SchemaSQL applied %v, want nothing", applied)
		}
		s, err := workerstore.New(b.db, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Insert(context.Background(), []relayer.Message{b.unordered(t)}); err != nil {
			t.Errorf("Insert into tables made by SchemaSQL: %v", err)
		}
	})
}

func execScript(t *testing.T, db *sql.DB, script string) {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(script); err != nil {
		t.Fatalf("script: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func TestSchemaIndexes(t *testing.T) {
	t.Parallel()
	b := setup(t, "pgx")
	rows, err := b.db.Query(`SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname`, b.opts.Schema)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	defs := map[string]string{}
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			t.Fatal(err)
		}
		defs[name] = def
	}
	for name, want := range map[string]string{
		"orders_outbox_lane_pending_idx":      "(lane, id) WHERE ((lane IS NOT NULL) AND (parked_at IS NULL))",
		"orders_outbox_unordered_pending_idx": "(id) WHERE ((lane IS NULL) AND (parked_at IS NULL))",
		"orders_outbox_held_keys_idx":         "(lane, ordering_key) WHERE ((lane IS NOT NULL) AND ((parked_at IS NOT NULL) OR (retry_at IS NOT NULL)))",
	} {
		if !strings.Contains(defs[name], want) {
			t.Errorf("index %s = %q, want it to contain %q", name, defs[name], want)
		}
	}
	if def, ok := defs["orders_outbox_parked_idx"]; ok {
		t.Errorf("index orders_outbox_parked_idx = %q, want it dropped by migration 2", def)
	}
}

// Migration 6 drops the three check constraints the first step created, by
// the names PostgreSQL gave them (with the longest prefix too), and keeps a
// check the outbox's owner added. An outbox without it is one this
// release's writers and workers run on.
func TestMigrationDropsTheOutboxChecks(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		for _, prefix := range []string{"checked_", strings.Repeat("p", store.TablePrefixMaxLen)} {
			t.Run(prefix, func(t *testing.T) { dropsTheOutboxChecks(t, b, prefix) })
		}
	})
}

func dropsTheOutboxChecks(t *testing.T, b *bundle, prefix string) {
	t.Helper()
	ctx := context.Background()
	opts := store.Tables{Schema: b.opts.Schema, TablePrefix: prefix}
	steps, err := store.Migrations(opts)
	must(t, err)
	for _, step := range steps {
		if step.Version <= store.MinSchemaVersion {
			_, err := b.db.ExecContext(ctx, step.SQL)
			must(t, err)
		}
	}
	outbox := `"` + opts.Schema + `"."` + prefix + `outbox"`
	checks := func() []string {
		t.Helper()
		rows, err := b.db.QueryContext(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint
    WHERE conrelid = $1::regclass AND contype = 'c' ORDER BY 1`, outbox)
		must(t, err)
		defer rows.Close()
		var defs []string
		for rows.Next() {
			var d string
			must(t, rows.Scan(&d))
			defs = append(defs, d)
		}
		must(t, rows.Err())
		return defs
	}
	if got := checks(); len(got) != 3 {
		t.Fatalf("checks at migration %d: %q, want the first step's three", store.MinSchemaVersion, got)
	}
	_, err = b.db.ExecContext(ctx, `ALTER TABLE `+outbox+` ADD CONSTRAINT owners CHECK (attempts < 1000000)`)
	must(t, err)
	st, err := workerstore.New(b.db, opts)
	must(t, err)
	exec := func(ctx context.Context, q string, args ...any) error {
		_, err := b.db.ExecContext(ctx, q, args...)
		return err
	}
	if v, err := st.CheckSchema(ctx); v != store.MinSchemaVersion || err != nil {
		t.Errorf("CheckSchema at migration %d: %d, %v; want no error", store.MinSchemaVersion, v, err)
	}
	if err := statementsOf(t, st.Tables()).CheckSchema(ctx, exec, true); err != nil {
		t.Errorf("the writers' schema check at migration %d: %v, want no error", store.MinSchemaVersion, err)
	}
	applied, err := store.Migrate(ctx, b.db, opts)
	must(t, err)
	var want []int
	for v := 6; v <= store.SchemaVersion; v++ {
		want = append(want, v)
	}
	if !slices.Equal(applied, want) {
		t.Errorf("Migrate applied %v, want %v", applied, want)
	}
	if got := checks(); !slices.Equal(got, []string{"CHECK ((attempts < 1000000))"}) {
		t.Errorf("checks after migration 6: %q, want only the owner's", got)
	}
}

// TestSchemaFillsOutboxPages checks that migration 5 lets inserts fill the
// outbox's pages whole, where migration 1 left half of each page free.
func TestSchemaFillsOutboxPages(t *testing.T) {
	t.Parallel()
	b := setup(t, "pgx")
	msgs := make([]relayer.Message, 70)
	for i := range msgs {
		msgs[i] = b.unordered(t)
		msgs[i].Body = make([]byte, 1000)
	}
	b.insert(t, msgs...)
	// About 1,100 bytes a row: 7 fit an 8 KiB page, 3 half of one.
	var most int
	if err := b.db.QueryRow(`SELECT max(n) FROM (SELECT count(*) AS n FROM "` + b.opts.Schema + `".orders_outbox
    GROUP BY (ctid::text::point)[0]) AS p`).Scan(&most); err != nil {
		t.Fatal(err)
	}
	if most < 6 {
		t.Errorf("at most %d rows of about 1,100 bytes on an outbox page, want 6 or more: pages are left part empty", most)
	}
}
