package store_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

func (b *bundle) inboxTable() string {
	return `"` + b.opts.Schema + `"."` + b.opts.TablePrefix + `inbox"`
}

func (b *bundle) begin(t *testing.T, opts *sql.TxOptions) (*sql.Tx, *workerstore.Store) {
	t.Helper()
	tx, err := b.db.BeginTx(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	st, err := b.store.With(tx)
	if err != nil {
		t.Fatal(err)
	}
	return tx, st
}

func TestRecordInboxOncePerConsumer(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		id := newID(t)
		for i, c := range []struct {
			consumer string
			want     bool
		}{
			{"billing", true},
			{"billing", false},
			{"shipping", true}, // another consumer deduplicates on its own
			{"shipping", false},
			{"Billing", true}, // names compare byte for byte
		} {
			first, err := b.store.RecordInbox(ctx, c.consumer, id)
			if err != nil || first != c.want {
				t.Errorf("call %d: RecordInbox(%q) = %v, %v; want %v", i, c.consumer, first, err, c.want)
			}
		}
		first, err := b.store.RecordInbox(ctx, "billing", newID(t))
		if err != nil || !first {
			t.Errorf("another message for billing = %v, %v; want recorded", first, err)
		}
		var n int
		var oldest time.Time
		if err := b.db.QueryRow(`SELECT count(*), min(received_at) FROM `+b.inboxTable()).Scan(&n, &oldest); err != nil {
			t.Fatal(err)
		}
		if n != 4 || time.Since(oldest) > time.Minute {
			t.Errorf("inbox holds %d rows, oldest received at %s; want 4 received just now", n, oldest)
		}
	})
}

// TestRecordInboxWaitsForTheFirstTransaction checks the property the inbox is
// built on: a second transaction recording the same pair waits until the first
// ends, then sees its outcome.
func TestRecordInboxWaitsForTheFirstTransaction(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		name := "rollback"
		if commit {
			name = "commit"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			eachDriver(t, func(t *testing.T, b *bundle) {
				ctx := context.Background()
				id := newID(t)
				tx1, st1 := b.begin(t, nil)
				if first, err := st1.RecordInbox(ctx, "billing", id); err != nil || !first {
					t.Fatalf("first transaction = %v, %v", first, err)
				}
				_, st2 := b.begin(t, nil)
				type result struct {
					first bool
					err   error
				}
				done := make(chan result, 1)
				go func() {
					first, err := st2.RecordInbox(ctx, "billing", id)
					done <- result{first, err}
				}()
				select {
				case r := <-done:
					t.Fatalf("second transaction did not wait for the first: %v, %v", r.first, r.err)
				case <-time.After(300 * time.Millisecond):
				}
				var err error
				if commit {
					err = tx1.Commit()
				} else {
					err = tx1.Rollback()
				}
				if err != nil {
					t.Fatal(err)
				}
				select {
				case r := <-done:
					if r.err != nil || r.first == commit {
						t.Errorf("after the first transaction's %s: second = %v, %v; want first = %v", name, r.first, r.err, !commit)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("second transaction still waiting after the first ended")
				}
			})
		})
	}
}

func TestRecordInboxUnderRepeatableRead(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		id := newID(t)
		tx, st := b.begin(t, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
		if _, err := tx.ExecContext(ctx, `SELECT 1`); err != nil { // takes the snapshot
			t.Fatal(err)
		}
		if first, err := b.store.RecordInbox(ctx, "billing", id); err != nil || !first {
			t.Fatalf("concurrent record = %v, %v", first, err)
		}
		first, err := st.RecordInbox(ctx, "billing", id)
		var state interface{ SQLState() string }
		if first || !errors.As(err, &state) || state.SQLState() != "40001" {
			t.Errorf("record of a pair committed after the snapshot = %v, %v; want a serialization failure", first, err)
		}
	})
}

func TestRecordInboxRejectsInvalidArguments(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, b *bundle) {
		ctx := context.Background()
		for _, c := range []struct {
			consumer string
			id       uuid.UUID
			want     string
		}{
			{"", newID(t), "empty"},
			{"bad\xffname", newID(t), "UTF-8"},
			{"nul\x00name", newID(t), "NUL"},
			{"billing", uuid.Nil, "zero UUID"},
		} {
			first, err := b.store.RecordInbox(ctx, c.consumer, c.id)
			if first || !errors.Is(err, store.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("RecordInbox(%q, %s) = %v, %v; want an invalid argument naming %q", c.consumer, c.id, first, err, c.want)
			}
		}
		var n int
		if err := b.db.QueryRow(`SELECT count(*) FROM ` + b.inboxTable()).Scan(&n); err != nil || n != 0 {
			t.Errorf("inbox rows after invalid calls = %d, %v", n, err)
		}
	})
}
