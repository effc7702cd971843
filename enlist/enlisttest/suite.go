package enlisttest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

// Placed is published on an unordered route.
type Placed struct{ N int }

// Shipped is published on an ordered route.
type Shipped struct{ N int }

// Unrouted has no route.
type Unrouted struct{}

// Lanes is the lane count of the suite's outbox.
const Lanes = 16

// Recorder is a [enlist.CommitListener] that keeps every notification.
type Recorder struct {
	Opts    store.Tables
	mu      sync.Mutex
	batches [][]relayer.Message
}

// Tables implements enlist.CommitListener.
func (r *Recorder) Tables() store.Tables { return r.Opts }

// Committed implements enlist.CommitListener.
func (r *Recorder) Committed(rows []relayer.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, rows)
	return nil
}

// Batches returns the notifications so far.
func (r *Recorder) Batches() [][]relayer.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

// env is one scenario's database, outbox and entry point.
type env struct {
	t      *testing.T
	db     *sql.DB
	schema string
	store  *store.Store
	rec    *Recorder
	writer *enlist.Writer
	ep     EntryPoint
	a      Adapter
}

func newEnv(t *testing.T, a Adapter) *env {
	t.Helper()
	driver := a.Driver
	if driver == "" {
		driver = "pgx"
	}
	db := testdb.Open(t, driver)
	schema := testdb.NewSchema(t)
	opts := store.Tables{Schema: schema, TablePrefix: "ob_"}
	ctx := context.Background()
	if _, err := store.Migrate(ctx, db, opts); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE "`+schema+`".orders (id bigint PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	st, err := store.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	var routes relayer.Routes
	if err := relayer.AddType[Placed](&routes, relayer.Route{Transport: "mem", Destination: "orders.placed"}); err != nil {
		t.Fatal(err)
	}
	if err := relayer.AddType[Shipped](&routes, relayer.Route{Transport: "mem", Destination: "orders.shipped", Ordered: true}); err != nil {
		t.Fatal(err)
	}
	rec := &Recorder{Opts: st.Tables()}
	w, err := enlist.NewWriter(relayer.Outbox{Schema: schema, TablePrefix: "ob_", Routes: &routes, Lanes: Lanes}, enlist.Options{Listener: rec})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, db: db, schema: schema, store: st, rec: rec, writer: w, a: a}
	e.ep = a.Open(t, db, w)
	return e
}

func (e *env) order(n int) string {
	return fmt.Sprintf(`INSERT INTO "%s".orders (id) VALUES (%d)`, e.schema, n)
}

// beginOrder begins a transaction through the entry point, inserts order 1
// in it and publishes msgs in one call: a business write and its messages,
// left open for the scenario to end.
func (e *env) beginOrder(ctx context.Context, msgs ...relayer.Outgoing) Tx {
	e.t.Helper()
	tx, err := e.ep.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := tx.Exec(ctx, e.order(1)); err != nil {
		e.t.Fatal(err)
	}
	if err := tx.Publish(ctx, msgs...); err != nil {
		e.t.Fatal(err)
	}
	return tx
}

// stored returns every outbox row, in id order.
func (e *env) stored() []store.Row {
	e.t.Helper()
	rows, err := e.store.ReadUnordered(context.Background(), nil, store.ReadOptions{Limit: 10000})
	if err != nil {
		e.t.Fatal(err)
	}
	for lane := range Lanes {
		more, err := e.store.ReadLane(context.Background(), nil, lane, store.ReadOptions{Limit: 10000})
		if err != nil {
			e.t.Fatal(err)
		}
		rows = append(rows, more...)
	}
	slices.SortFunc(rows, func(a, b store.Row) int { return bytes.Compare(a.ID[:], b.ID[:]) })
	return rows
}

func (e *env) orders() int {
	e.t.Helper()
	var n int
	if err := e.db.QueryRow(`SELECT count(*) FROM "` + e.schema + `".orders`).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) notifiedIDs() []uuid.UUID {
	var ids []uuid.UUID
	for _, b := range e.rec.Batches() {
		for _, m := range b {
			ids = append(ids, m.ID)
		}
	}
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	return ids
}

func rowIDs(rows []store.Row) []uuid.UUID {
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return ids
}

func placed(n int) relayer.Outgoing { return relayer.NewOutgoing(Placed{N: n}) }

// Run runs the conformance suite against a; every scenario is a parallel
// subtest with its own schema.
func Run(t *testing.T, a Adapter) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.run(t, newEnv(t, a))
		})
	}
}

var scenarios = []struct {
	name string
	run  func(t *testing.T, e *env)
}{
	{"CommitKeepsRowsAndNotifiesOnce", commitKeepsRowsAndNotifiesOnce},
	{"RollbackKeepsNothing", rollbackKeepsNothing},
	{"RunInTxCommitsOrRollsBack", runInTxCommitsOrRollsBack},
	{"SavepointRollback", savepointRollback},
	{"StoredAsPublished", storedAsPublished},
	{"ManyMessages", manyMessages},
	{"ConcurrentTransactions", concurrentTransactions},
	{"CancelledBeforeCommit", cancelledBeforeCommit},
	{"InvalidMessagesWriteNothing", invalidMessagesWriteNothing},
	{"PublishAfterEnd", publishAfterEnd},
	{"OutdatedSchemaRefused", outdatedSchemaRefused},
}

func commitKeepsRowsAndNotifiesOnce(t *testing.T, e *env) {
	ctx := context.Background()
	tx := e.beginOrder(ctx, placed(1))
	if err := tx.Publish(ctx, placed(2), relayer.NewOutgoing(Shipped{N: 3}, relayer.Key("c-1"))); err != nil {
		t.Fatal(err)
	}
	if n := len(e.rec.Batches()); n != 0 {
		t.Fatalf("notified %d times before commit", n)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	batches := e.rec.Batches()
	if len(batches) != 1 {
		t.Fatalf("notified %d times, want once", len(batches))
	}
	stored := e.stored()
	if len(stored) != 3 || e.orders() != 1 {
		t.Fatalf("after commit: %d rows, %d orders; want 3 and 1", len(stored), e.orders())
	}
	if got, want := e.notifiedIDs(), rowIDs(stored); !slices.Equal(got, want) {
		t.Errorf("notified %v, want exactly the committed rows %v", got, want)
	}
	if n := len(e.rec.Batches()); n != 1 {
		t.Errorf("notified %d times after a second look, want once", n)
	}
}

func rollbackKeepsNothing(t *testing.T, e *env) {
	tx := e.beginOrder(context.Background(), placed(1), placed(2))
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n := len(e.stored()); n != 0 || e.orders() != 0 {
		t.Errorf("after rollback: %d rows, %d orders", n, e.orders())
	}
	if n := len(e.rec.Batches()); n != 0 {
		t.Errorf("rollback notified %d times", n)
	}
}

func runInTxCommitsOrRollsBack(t *testing.T, e *env) {
	ctx := context.Background()
	boom := errors.New("boom")
	err := e.ep.RunInTx(ctx, func(ctx context.Context, tx Tx) error {
		if err := tx.Exec(ctx, e.order(1)); err != nil {
			return err
		}
		if err := tx.Publish(ctx, placed(1)); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Errorf("RunInTx returned %v, want the callback's error", err)
	}
	func() {
		defer func() {
			if r := recover(); r != "panic in callback" {
				t.Errorf("recovered %v, want the callback's panic", r)
			}
		}()
		_ = e.ep.RunInTx(ctx, func(ctx context.Context, tx Tx) error {
			if err := tx.Exec(ctx, e.order(2)); err != nil {
				return err
			}
			if err := tx.Publish(ctx, placed(2)); err != nil {
				return err
			}
			panic("panic in callback")
		})
	}()
	if n := len(e.stored()); n != 0 || e.orders() != 0 || len(e.rec.Batches()) != 0 {
		t.Fatalf("after error and panic: %d rows, %d orders, %d notifications; want none", n, e.orders(), len(e.rec.Batches()))
	}
	err = e.ep.RunInTx(ctx, func(ctx context.Context, tx Tx) error {
		if err := tx.Exec(ctx, e.order(3)); err != nil {
			return err
		}
		return tx.Publish(ctx, placed(3))
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(e.stored()); n != 1 || e.orders() != 1 || len(e.rec.Batches()) != 1 {
		t.Errorf("after success: %d rows, %d orders, %d notifications; want one each", n, e.orders(), len(e.rec.Batches()))
	}
}

func savepointRollback(t *testing.T, e *env) {
	ctx := context.Background()
	var kept, dropped uuid.UUID
	kept, dropped = uuid.Must(relayer.NewID()), uuid.Must(relayer.NewID())
	nestedKept := uuid.Must(relayer.NewID())
	err := e.ep.RunInTx(ctx, func(ctx context.Context, tx Tx) error {
		if err := tx.Publish(ctx, relayer.NewOutgoing(Placed{1}, relayer.WithID(kept))); err != nil {
			return err
		}
		err := tx.Nested(ctx, func(ctx context.Context, tx Tx) error {
			if err := tx.Exec(ctx, e.order(1)); err != nil {
				return err
			}
			if err := tx.Publish(ctx, relayer.NewOutgoing(Placed{2}, relayer.WithID(dropped))); err != nil {
				return err
			}
			return errors.New("undo the nested part")
		})
		if err == nil {
			return errors.New("nested call did not report its error")
		}
		return tx.Nested(ctx, func(ctx context.Context, tx Tx) error {
			return tx.Publish(ctx, relayer.NewOutgoing(Placed{3}, relayer.WithID(nestedKept)))
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	stored := rowIDs(e.stored())
	want := []uuid.UUID{kept, nestedKept}
	slices.SortFunc(want, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	if !slices.Equal(stored, want) || e.orders() != 0 {
		t.Errorf("stored %v and %d orders, want %v and none: the rolled-back savepoint's rows must be gone", stored, e.orders(), want)
	}
	notified := e.notifiedIDs()
	for _, id := range want {
		if !slices.Contains(notified, id) {
			t.Errorf("committed row %s was not notified", id)
		}
	}
	// The notification may name the rolled-back row (listeners never send a row
	// that is not in the table), but nothing else.
	for _, id := range notified {
		if id != dropped && !slices.Contains(want, id) {
			t.Errorf("notified unknown row %s", id)
		}
	}
}

func storedAsPublished(t *testing.T, e *env) {
	ctx := context.Background()
	id := uuid.Must(relayer.NewID())
	deliver := time.Date(2031, 5, 6, 7, 8, 9, 123456789, time.UTC)
	hs := []headers.Header{
		{Name: "dup", Value: []byte("one")},
		{Name: "bin", Value: []byte{0, 0xff, '\\', '"'}},
		{Name: "dup", Value: []byte("two")},
		{Name: "empty", Value: []byte{}},
	}
	out := relayer.Outgoing{Message: Shipped{N: 42}, Key: "customer-ü-7", DeliverAt: deliver, Headers: hs, ID: id}
	before := time.Now().Add(-time.Second)
	if err := e.ep.RunInTx(ctx, func(ctx context.Context, tx Tx) error { return tx.Publish(ctx, out) }); err != nil {
		t.Fatal(err)
	}
	rows, err := e.store.ReadLane(ctx, nil, mustLane(t, "customer-ü-7"), store.ReadOptions{Now: deliver, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("read %d rows from the key's lane, want 1", len(rows))
	}
	got := rows[0]
	wantHeaders := append([]headers.Header{{Name: relayer.HeaderContentType, Value: []byte("application/json")}}, hs...)
	checkStored(t, got, id, deliver, before, wantHeaders)
	// The notification carries the same bytes.
	batches := e.rec.Batches()
	if len(batches) != 1 || len(batches[0]) != 1 {
		t.Fatalf("notifications %v", batches)
	}
	n := batches[0][0]
	if n.ID != id || !bytes.Equal(n.Body, got.Body) || n.Lane != got.Lane || len(n.Headers) != len(got.Headers) {
		t.Errorf("notified %+v differs from stored %+v", n, got.Message)
	}
}

// checkStored reports the first field of got, the row stored for the
// message storedAsPublished publishes, that differs from what it published.
func checkStored(t *testing.T, got store.Row, id uuid.UUID, deliver, before time.Time, wantHeaders []headers.Header) {
	t.Helper()
	switch {
	case got.ID != id:
		t.Errorf("id %s, want %s", got.ID, id)
	case got.Type != "enlisttest.Shipped" || got.Transport != "mem" || got.Destination != "orders.shipped":
		t.Errorf("type/route %s %s %s", got.Type, got.Transport, got.Destination)
	case string(got.Body) != `{"N":42}`:
		t.Errorf("body %q", got.Body)
	case !slices.EqualFunc(got.Headers, wantHeaders, func(a, b headers.Header) bool { return a.Name == b.Name && bytes.Equal(a.Value, b.Value) }):
		t.Errorf("headers %q, want %q", got.Headers, wantHeaders)
	case got.Key != "customer-ü-7" || !got.Ordered:
		t.Errorf("key %q ordered %v", got.Key, got.Ordered)
	case !got.DeliverAt.Equal(deliver.Truncate(time.Microsecond)):
		t.Errorf("deliver at %v, want %v", got.DeliverAt, deliver)
	case got.CreatedAt.Before(before) || got.CreatedAt.After(time.Now().Add(time.Second)):
		t.Errorf("created at %v, want about now", got.CreatedAt)
	}
}

func mustLane(t *testing.T, key string) int {
	lane, err := relayer.Lane(key, Lanes)
	if err != nil {
		t.Fatal(err)
	}
	return lane
}

func manyMessages(t *testing.T, e *env) {
	ctx := context.Background()
	const n = 500
	msgs := make([]relayer.Outgoing, n)
	for i := range msgs {
		if i%2 == 0 {
			msgs[i] = placed(i)
		} else {
			msgs[i] = relayer.NewOutgoing(Shipped{N: i}, relayer.Key(fmt.Sprintf("k%d", i%37)))
		}
	}
	if err := e.ep.RunInTx(ctx, func(ctx context.Context, tx Tx) error { return tx.Publish(ctx, msgs...) }); err != nil {
		t.Fatal(err)
	}
	stored := e.stored()
	if len(stored) != n {
		t.Fatalf("stored %d rows, want %d", len(stored), n)
	}
	for _, r := range stored {
		if r.Ordered {
			if want := mustLane(t, r.Key); r.Lane != want {
				t.Errorf("row with key %q in lane %d, want %d", r.Key, r.Lane, want)
			}
		}
	}
	if got := e.notifiedIDs(); !slices.Equal(got, rowIDs(stored)) {
		t.Errorf("notified %d ids, want the %d stored", len(got), n)
	}
}

func concurrentTransactions(t *testing.T, e *env) {
	ctx := context.Background()
	const workers, perWorker, perTx = 6, 8, 3
	owner := sync.Map{} // message id -> transaction number
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				txn := w*perWorker + i
				msgs := make([]relayer.Outgoing, perTx)
				for j := range msgs {
					id := uuid.Must(relayer.NewID())
					owner.Store(id, txn)
					msgs[j] = relayer.NewOutgoing(Placed{N: txn}, relayer.WithID(id))
				}
				errs <- e.ep.RunInTx(ctx, func(ctx context.Context, tx Tx) error {
					for _, m := range msgs {
						if err := tx.Publish(ctx, m); err != nil {
							return err
						}
					}
					return nil
				})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	batches := e.rec.Batches()
	if len(batches) != workers*perWorker {
		t.Fatalf("%d notifications, want one per transaction (%d)", len(batches), workers*perWorker)
	}
	for _, b := range batches {
		if len(b) != perTx {
			t.Errorf("notification of %d rows, want %d", len(b), perTx)
			continue
		}
		first, _ := owner.Load(b[0].ID)
		for _, m := range b {
			if txn, _ := owner.Load(m.ID); txn != first {
				t.Errorf("one notification mixes transactions %v and %v", first, txn)
			}
		}
	}
	if n := len(e.stored()); n != workers*perWorker*perTx {
		t.Errorf("stored %d rows", n)
	}
}

func cancelledBeforeCommit(t *testing.T, e *env) {
	ctx, cancel := context.WithCancel(context.Background())
	tx := e.beginOrder(ctx, placed(1))
	cancel()
	if err := tx.Commit(); err == nil {
		t.Error("Commit after the transaction's context was cancelled succeeded")
	}
	_ = tx.Rollback()
	// database/sql rolls back asynchronously when the context ends; wait for it.
	testkit.Within(5*time.Second, func() bool { return len(e.stored()) == 0 && e.orders() == 0 })
	if n := len(e.stored()); n != 0 || e.orders() != 0 || len(e.rec.Batches()) != 0 {
		t.Errorf("after cancellation: %d rows, %d orders, %d notifications; want none", n, e.orders(), len(e.rec.Batches()))
	}
}

func invalidMessagesWriteNothing(t *testing.T, e *env) {
	ctx := context.Background()
	for name, out := range map[string]relayer.Outgoing{
		"nil":            {},
		"no route":       relayer.NewOutgoing(Unrouted{}),
		"ordered no key": relayer.NewOutgoing(Shipped{}),
		"header name":    relayer.NewOutgoing(Placed{}, relayer.Header("\xff", nil)),
	} {
		err := e.ep.RunInTx(ctx, func(ctx context.Context, tx Tx) error {
			// A valid message first: the batch is refused whole.
			return tx.Publish(ctx, placed(0), out)
		})
		if !errors.Is(err, relayer.ErrInvalidMessage) {
			t.Errorf("%s: %v, want ErrInvalidMessage", name, err)
		}
		if name == "no route" && !errors.Is(err, relayer.ErrNoRoute) {
			t.Errorf("no route: %v, want ErrNoRoute too", err)
		}
	}
	// A key on an unordered route is allowed and kept.
	if err := e.ep.RunInTx(ctx, func(ctx context.Context, tx Tx) error {
		return tx.Publish(ctx, relayer.NewOutgoing(Placed{}, relayer.Key("kept")))
	}); err != nil {
		t.Fatal(err)
	}
	stored := e.stored()
	if len(stored) != 1 || stored[0].Key != "kept" || stored[0].Ordered {
		t.Errorf("stored %+v, want only the keyed unordered message", stored)
	}
}

func publishAfterEnd(t *testing.T, e *env) {
	ctx := context.Background()
	tx, err := e.ep.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Publish(ctx, placed(1)); !errors.Is(err, relayer.ErrNotInTransaction) {
		t.Errorf("Publish after commit = %v, want ErrNotInTransaction", err)
	}
	if n := len(e.stored()); n != 0 {
		t.Errorf("%d rows written after commit", n)
	}
}

// outdatedSchemaRefused publishes to an outbox whose tables lack a migration
// (an upgrade whose migration was forgotten): the publish fails with
// store.ErrSchemaOutdated, and the transaction writes nothing.
func outdatedSchemaRefused(t *testing.T, e *env) {
	ctx := context.Background()
	opts := store.Tables{Schema: e.schema, TablePrefix: "old_"}
	steps, err := store.Migrations(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.ExecContext(ctx, steps[0].SQL); err != nil {
		t.Fatal(err)
	}
	var routes relayer.Routes
	if err := relayer.AddType[Placed](&routes, relayer.Route{Transport: "mem", Destination: "orders.placed"}); err != nil {
		t.Fatal(err)
	}
	w, err := enlist.NewWriter(relayer.Outbox{Schema: e.schema, TablePrefix: "old_", Routes: &routes, Lanes: Lanes}, enlist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ep := e.a.Open(t, e.db, w)
	err = ep.RunInTx(ctx, func(ctx context.Context, tx Tx) error {
		if err := tx.Exec(ctx, e.order(1)); err != nil {
			return err
		}
		return tx.Publish(ctx, placed(1))
	})
	if !errors.Is(err, store.ErrSchemaOutdated) {
		t.Errorf("publish on a schema at migration 1: %v, want store.ErrSchemaOutdated", err)
	}
	var n int
	if err := e.db.QueryRowContext(ctx, `SELECT count(*) FROM "`+e.schema+`".old_outbox`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 || e.orders() != 0 {
		t.Errorf("%d rows and %d orders written on the outdated schema, want none", n, e.orders())
	}
}
