package enlist_test

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/enlist/enlisttest"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, driver := range testdb.Drivers() {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			enlisttest.Run(t, enlisttest.Adapter{
				Driver: driver,
				Open: func(t *testing.T, db *sql.DB, w *enlist.Writer) enlisttest.EntryPoint {
					return enlisttest.SQL(db, w)
				},
			})
		})
	}
}

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Committing through the embedded *sql.Tx skips the listener; once the
// enlist.Tx is collected, a warning names the fix. A transaction committed
// through the enlist.Tx warns of nothing.
func TestCommitAroundTheWrapperIsReported(t *testing.T) {
	ctx := context.Background()
	db := testdb.Open(t, "pgx")
	schema := testdb.NewSchema(t)
	if _, err := store.Migrate(ctx, db, store.Tables{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	var routes relayer.Routes
	if err := relayer.AddType[enlisttest.Placed](&routes, relayer.Route{Transport: "mem", Destination: "d"}); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	w, err := enlist.NewWriter(relayer.Outbox{Schema: schema, Routes: &routes}, enlist.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(commit func(tx *enlist.Tx) error) {
		tx, err := w.Begin(ctx, db, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Publish(ctx, enlisttest.Placed{N: 1}); err != nil {
			t.Fatal(err)
		}
		if err := commit(tx); err != nil {
			t.Fatal(err)
		}
	}
	const warning = "dropped without Commit or Rollback on the enlist.Tx"
	publish(func(tx *enlist.Tx) error { return tx.Commit() })
	for range 3 { // an absence: three collections report nothing
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Contains(logs.String(), warning) {
		t.Fatalf("a transaction committed through enlist.Tx was reported:\n%s", logs)
	}
	publish(func(tx *enlist.Tx) error { return tx.Tx.Commit() })
	testkit.Within(5*time.Second, func() bool { runtime.GC(); return strings.Contains(logs.String(), warning) })
	if !strings.Contains(logs.String(), warning) || !strings.Contains(logs.String(), "tx.Commit()") {
		t.Fatalf("a commit through the embedded *sql.Tx was not reported:\n%s", logs)
	}
}
