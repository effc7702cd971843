package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/inbox"
	"github.com/relayer-go/relayer/internal/testkit/inboxtest"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// deliver runs one delivery the way a consumer does: in its own transaction,
// committed when Handle succeeds and rolled back otherwise. fail makes the
// handler fail after its write.
func deliver(t *testing.T, b *inboxtest.Bundle, consumer string, id uuid.UUID, fail error) (bool, error) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	handled, err := b.Inbox.Handle(ctx, tx, consumer, id, func(ctx context.Context) error {
		if err := b.Increment(ctx, tx, consumer); err != nil {
			return err
		}
		return fail
	})
	if err != nil {
		return handled, err
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return handled, nil
}

func TestDuplicateDeliveryRunsTheHandlerOnce(t *testing.T) {
	t.Parallel()
	inboxtest.EachDriver(t, func(t *testing.T, b *inboxtest.Bundle) {
		id := inboxtest.NewID(t)
		for i, want := range []bool{true, false, false} {
			if handled, err := deliver(t, b, "billing", id, nil); err != nil || handled != want {
				t.Errorf("delivery %d = %v, %v; want handled %v", i, handled, err, want)
			}
		}
		if n := b.Count(t, "billing"); n != 1 {
			t.Errorf("handler effects committed %d times, want 1", n)
		}
		if handled, err := deliver(t, b, "billing", inboxtest.NewID(t), nil); err != nil || !handled {
			t.Errorf("another message = %v, %v; want handled", handled, err)
		}
	})
}

func TestFailedHandlerLetsRedeliveryRunAgain(t *testing.T) {
	t.Parallel()
	inboxtest.EachDriver(t, func(t *testing.T, b *inboxtest.Bundle) {
		id := inboxtest.NewID(t)
		boom := errors.New("boom")
		handled, err := deliver(t, b, "billing", id, boom)
		if err != boom || !handled {
			t.Fatalf("failing delivery = %v, %v; want handled and the handler's own error", handled, err)
		}
		if n := b.Count(t, "billing"); n != 0 {
			t.Fatalf("a rolled-back handler left %d writes", n)
		}
		if handled, err := deliver(t, b, "billing", id, nil); err != nil || !handled {
			t.Errorf("redelivery after the failure = %v, %v; want handled", handled, err)
		}
		if handled, err := deliver(t, b, "billing", id, nil); err != nil || handled {
			t.Errorf("redelivery after the success = %v, %v; want a duplicate", handled, err)
		}
		if n := b.Count(t, "billing"); n != 1 {
			t.Errorf("handler effects committed %d times, want 1", n)
		}
	})
}

func TestConsumersDeduplicateIndependently(t *testing.T) {
	t.Parallel()
	inboxtest.EachDriver(t, func(t *testing.T, b *inboxtest.Bundle) {
		id := inboxtest.NewID(t)
		consumers := []string{"billing", "shipping", "analytics"}
		for round, want := range []bool{true, false} {
			for _, c := range consumers {
				if handled, err := deliver(t, b, c, id, nil); err != nil || handled != want {
					t.Errorf("round %d, %s = %v, %v; want handled %v", round, c, handled, err, want)
				}
			}
		}
		for _, c := range consumers {
			if n := b.Count(t, c); n != 1 {
				t.Errorf("%s handled the message %d times, want 1", c, n)
			}
		}
	})
}

// TestConcurrentDeliveriesCommitOnce delivers one message to one consumer from
// eight transactions at once. The handler holds its transaction open a while,
// so that the others queue on the inbox record behind it.
func TestConcurrentDeliveriesCommitOnce(t *testing.T) {
	t.Parallel()
	for _, firstFails := range []bool{false, true} {
		name := "first commits"
		if firstFails {
			name = "first rolls back"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			inboxtest.EachDriver(t, func(t *testing.T, b *inboxtest.Bundle) {
				const deliveries = 8
				ctx := context.Background()
				id := inboxtest.NewID(t)
				boom := errors.New("boom")
				var (
					calls   atomic.Int32
					start   = make(chan struct{})
					ready   sync.WaitGroup
					done    sync.WaitGroup
					handled atomic.Int32
					failed  atomic.Int32
				)
				errs := make(chan error, deliveries)
				for range deliveries {
					ready.Add(1)
					done.Add(1)
					go func() {
						defer done.Done()
						tx, err := b.DB.BeginTx(ctx, nil)
						ready.Done()
						if err != nil {
							errs <- err
							return
						}
						defer tx.Rollback()
						<-start
						h, err := b.Inbox.Handle(ctx, tx, "billing", id, func(ctx context.Context) error {
							n := calls.Add(1)
							if err := b.Increment(ctx, tx, "billing"); err != nil {
								return err
							}
							time.Sleep(100 * time.Millisecond)
							if firstFails && n == 1 {
								return boom
							}
							return nil
						})
						switch {
						case errors.Is(err, boom):
							failed.Add(1)
							return // rolled back by the defer
						case err != nil:
							errs <- err
							return
						}
						if err := tx.Commit(); err != nil {
							errs <- err
							return
						}
						if h {
							handled.Add(1)
						}
					}()
				}
				ready.Wait()
				close(start)
				done.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
				wantCalls, wantFailed := int32(1), int32(0)
				if firstFails {
					wantCalls, wantFailed = 2, 1
				}
				if got := handled.Load(); got != 1 {
					t.Errorf("%d deliveries committed as handled, want exactly 1", got)
				}
				if got, gotFailed := calls.Load(), failed.Load(); got != wantCalls || gotFailed != wantFailed {
					t.Errorf("handler ran %d times with %d failures, want %d and %d", got, gotFailed, wantCalls, wantFailed)
				}
				if n := b.Count(t, "billing"); n != 1 {
					t.Errorf("counter = %d after %d concurrent deliveries, want 1", n, deliveries)
				}
			})
		})
	}
}

func TestHandleMessage(t *testing.T) {
	t.Parallel()
	b := inboxtest.Setup(t, "pgx")
	ctx := context.Background()
	msg := &relayer.Message{ID: inboxtest.NewID(t), Type: "orders.OrderPlaced", Body: []byte(`{}`)}
	for i, want := range []bool{true, false} {
		tx, err := b.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		handled, err := b.Inbox.HandleMessage(ctx, tx, "billing", msg, func(ctx context.Context) error {
			return b.Increment(ctx, tx, "billing")
		})
		if err != nil || handled != want {
			t.Errorf("delivery %d = %v, %v; want handled %v", i, handled, err, want)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.Count(t, "billing"); n != 1 {
		t.Errorf("counter = %d, want 1", n)
	}
}

func TestHandleRejectsInvalidArgumentsAndNonTransactions(t *testing.T) {
	t.Parallel()
	b := inboxtest.Setup(t, "pgx")
	ctx := context.Background()
	tx, err := b.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	conn, err := b.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	var called atomic.Bool
	handler := func(context.Context) error { called.Store(true); return nil }
	id := inboxtest.NewID(t)
	for _, c := range []struct {
		name     string
		q        store.DBTX
		consumer string
		id       uuid.UUID
		handler  func(context.Context) error
		want     error
		mention  string
	}{
		{"empty consumer", tx, "", id, handler, store.ErrInvalidArgument, "consumer"},
		{"consumer not UTF-8", tx, "bad\xff", id, handler, store.ErrInvalidArgument, "UTF-8"},
		{"consumer with NUL", tx, "a\x00b", id, handler, store.ErrInvalidArgument, "NUL"},
		{"zero id", tx, "billing", uuid.Nil, handler, store.ErrInvalidArgument, "zero UUID"},
		{"nil handler", tx, "billing", id, nil, store.ErrInvalidArgument, "handler"},
		{"nil q", nil, "billing", id, handler, store.ErrNilDB, ""},
		{"typed nil *sql.Tx", (*sql.Tx)(nil), "billing", id, handler, store.ErrNilDB, ""},
		{"*sql.DB", b.DB, "billing", id, handler, store.ErrInvalidArgument, "*sql.DB"},
		{"*sql.Conn", conn, "billing", id, handler, store.ErrInvalidArgument, "*sql.Conn"},
	} {
		handled, err := b.Inbox.Handle(ctx, c.q, c.consumer, c.id, c.handler)
		if handled || !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%s: Handle = %v, %v; want an error wrapping %v and mentioning %q", c.name, handled, err, c.want, c.mention)
		}
	}
	if _, err := b.Inbox.HandleMessage(ctx, tx, "billing", nil, handler); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("HandleMessage(nil) = %v, want ErrInvalidArgument", err)
	}
	if called.Load() {
		t.Error("a handler ran for an invalid call")
	}
	var n int
	if err := b.DB.QueryRow(`SELECT count(*) FROM "` + b.Inbox.Options().Schema + `".ib_inbox`).Scan(&n); err != nil || n != 0 {
		t.Errorf("inbox rows after invalid calls: %d, %v", n, err)
	}
	if _, err := inbox.New(store.Tables{Schema: "Bad-Schema"}); !errors.Is(err, store.ErrInvalidOptions) {
		t.Errorf("New with a bad schema = %v, want ErrInvalidOptions", err)
	}
}
