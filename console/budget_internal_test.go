package console

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

// A read the page can do without gives up within its share of the budget,
// and the page's transaction goes on with the rest of it.
func TestOptionalReadGivesUpWithinItsShare(t *testing.T) {
	t.Parallel()
	db := testdb.Open(t, "pgx")
	opts := store.Tables{Schema: testdb.NewSchema(t)}
	if _, err := store.Migrate(context.Background(), db, opts); err != nil {
		t.Fatal(err)
	}
	c, err := New(db, opts, Options{QueryTimeout: 4 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	err = c.withTx(httptest.NewRequest("GET", "/", nil), true, func(ctx context.Context, b *budgetTx) error {
		start := time.Now()
		done, err := b.optional(ctx, 0.25, func() error {
			_, err := b.tx.ExecContext(ctx, "SELECT pg_sleep(10)")
			return err
		})
		if err != nil || done {
			t.Errorf("optional(a 10 s read, a quarter of 4 s) = %t, %v; want false, nil", done, err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("the optional read gave up after %v, past its share of the budget", d)
		}
		var one int
		done, err = b.optional(ctx, 0.5, func() error { return b.tx.QueryRowContext(ctx, "SELECT 1").Scan(&one) })
		if err != nil || !done || one != 1 {
			t.Errorf("optional(SELECT 1) after one gave up = %t, %v (%d); want true, nil", done, err, one)
		}
		// The rest of the transaction has the rest of the budget, not the
		// optional read's share of it.
		var timeout string
		if err := b.tx.QueryRowContext(ctx, "SELECT current_setting('statement_timeout')").Scan(&timeout); err != nil {
			t.Errorf("a statement after the optional reads: %v", err)
		}
		if d, err := time.ParseDuration(timeout); err != nil || d < time.Until(b.end)-time.Second {
			t.Errorf("statement_timeout after the optional reads = %q; want what is left of the budget, %v", timeout, time.Until(b.end))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
