package dispatch_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
	"github.com/relayer-go/relayer/transport/memory"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type Placed struct{ N int }
type Billed struct{ N int }
type Shipped struct{ N int }
type Lost struct{ N int }

// logBuffer collects log lines for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

type bundle struct {
	db     *sql.DB
	schema string
	opts   store.Tables
	store  *workerstore.Store
	outbox relayer.Outbox
	mem    *memory.Transport
	direct *dispatch.Direct
	writer *enlist.Writer
	logs   *logBuffer
}

func setup(t testing.TB, opts dispatch.DirectOptions) *bundle {
	t.Helper()
	return setupOn(t, testdb.Open(t, "pgx"), opts)
}

// setupOn is setup on a database handle of the caller's.
func setupOn(t testing.TB, db *sql.DB, opts dispatch.DirectOptions) *bundle {
	t.Helper()
	ctx := context.Background()
	schema := testdb.NewSchema(t)
	sopts := store.Tables{Schema: schema, TablePrefix: "ob_"}
	if _, err := store.Migrate(ctx, db, sopts); err != nil {
		t.Fatal(err)
	}
	st, err := workerstore.New(db, sopts)
	if err != nil {
		t.Fatal(err)
	}
	var routes relayer.Routes
	must(t, relayer.AddType[Placed](&routes, relayer.Route{Transport: "mem", Destination: "orders.placed"}))
	must(t, relayer.AddType[Billed](&routes, relayer.Route{Transport: "mem", Destination: "billing"}))
	must(t, relayer.AddType[Shipped](&routes, relayer.Route{Transport: "mem", Destination: "orders.shipped", Ordered: true}))
	must(t, relayer.AddType[Lost](&routes, relayer.Route{Transport: "nowhere", Destination: "void"}))
	mem := memory.New()
	outbox := relayer.Outbox{Schema: schema, TablePrefix: "ob_", Routes: &routes, Transports: map[string]relayer.Transport{"mem": mem}}
	logs := &logBuffer{}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	d, err := dispatch.NewDirect(db, outbox, opts)
	if err != nil {
		t.Fatal(err)
	}
	w, err := enlist.NewWriter(outbox, enlist.Options{Listener: d, Logger: opts.Logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d.Stop(ctx)
	})
	return &bundle{db: db, schema: schema, opts: sopts, store: st, outbox: outbox, mem: mem, direct: d, writer: w, logs: logs}
}

func (b *bundle) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b.logs, nil)) }

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) start(t *testing.T) {
	t.Helper()
	must(t, b.direct.Start(context.Background()))
}

func (b *bundle) publish(t *testing.T, msgs ...relayer.Outgoing) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, len(msgs))
	for i := range msgs {
		if msgs[i].ID == uuid.Nil {
			msgs[i].ID = uuid.Must(relayer.NewID())
		}
		ids[i] = msgs[i].ID
	}
	err := b.writer.RunInTx(context.Background(), b.db, nil, func(tx *enlist.Tx) error {
		return tx.PublishAll(context.Background(), msgs...)
	})
	must(t, err)
	return ids
}

func (b *bundle) waitSent(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.mem.WaitFor(ctx, n); err != nil {
		t.Fatal(err)
	}
}

// rows returns every outbox row with its bookkeeping, in id order.
type rawRow struct {
	id       uuid.UUID
	attempts int
	lastErr  sql.NullString
	claimed  bool
}

func (b *bundle) rows(t *testing.T) []rawRow {
	t.Helper()
	rs, err := b.db.Query(`SELECT id, attempts, last_error, claim_token IS NOT NULL FROM "` + b.schema + `".ob_outbox ORDER BY id`)
	must(t, err)
	defer rs.Close()
	var out []rawRow
	for rs.Next() {
		var r rawRow
		must(t, rs.Scan(&r.id, &r.attempts, &r.lastErr, &r.claimed))
		out = append(out, r)
	}
	return out
}

// waitRows waits until the outbox holds n rows.
func (b *bundle) waitRows(t *testing.T, n int) []rawRow {
	t.Helper()
	var rows []rawRow
	testkit.Eventually(t, 10*time.Second, func() bool { rows = b.rows(t); return len(rows) == n }, "%d rows in the outbox", n)
	return rows
}

func sentIDs(msgs []relayer.Message) []uuid.UUID {
	ids := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}

func sorted(ids []uuid.UUID) []uuid.UUID {
	ids = slices.Clone(ids)
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	return ids
}

func TestCommitSendsOnceAsStored(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	b.start(t)
	ids := b.publish(t,
		relayer.NewOutgoing(Placed{1}, relayer.Header("h", []byte{0, 1})),
		relayer.NewOutgoing(Placed{2}),
		relayer.NewOutgoing(Billed{3}, relayer.DeliverAt(time.Now().Add(-time.Minute))),
	)
	b.waitSent(t, 3)
	b.waitRows(t, 0)
	// A later commit flushes anything still queued: nothing more arrives.
	b.publish(t, relayer.NewOutgoing(Placed{4}))
	b.waitSent(t, 4)
	all := b.mem.All()
	if len(all) != 4 {
		t.Fatalf("sent %d messages, want 4 (each once)", len(all))
	}
	placed := b.mem.Messages("orders.placed")
	if got := sentIDs(placed[:2]); !slices.Equal(sorted(got), sorted(ids[:2])) {
		t.Errorf("orders.placed got %v, want %v", got, ids[:2])
	}
	m := placed[0]
	if m.ID == ids[1] {
		m = placed[1]
	}
	if string(m.Body) != `{"N":1}` || m.Type != "dispatch_test.Placed" || len(m.Headers) != 2 ||
		m.Headers[1].Name != "h" || !bytes.Equal(m.Headers[1].Value, []byte{0, 1}) {
		t.Errorf("sent %+v, want the stored message unchanged", m)
	}
	if got := b.mem.Messages("billing"); len(got) != 1 || got[0].ID != ids[2] {
		t.Errorf("billing got %v, want the due scheduled message", got)
	}
	b.waitRows(t, 0)
	testkit.Eventually(t, 5*time.Second, func() bool { return b.direct.Stats().Deleted >= 4 }, "4 rows deleted")
	if s := b.direct.Stats(); s.Sent != 4 || s.Deleted != 4 || s.Failed != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestRollbackAndSavepointRowsAreNeverSent(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	b.start(t)
	ctx := context.Background()
	tx, err := b.writer.Begin(ctx, b.db, nil)
	must(t, err)
	must(t, tx.Publish(ctx, Placed{1}))
	must(t, tx.Rollback())

	var kept, dropped uuid.UUID = uuid.Must(relayer.NewID()), uuid.Must(relayer.NewID())
	err = b.writer.RunInTx(ctx, b.db, nil, func(tx *enlist.Tx) error {
		if err := tx.Publish(ctx, Placed{2}, relayer.WithID(kept)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "SAVEPOINT sp"); err != nil {
			return err
		}
		if err := tx.Publish(ctx, Placed{3}, relayer.WithID(dropped)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT sp")
		return err
	})
	must(t, err)
	marker := b.publish(t, relayer.NewOutgoing(Billed{4}))
	b.waitSent(t, 2)
	b.waitRows(t, 0)
	got := sentIDs(b.mem.All())
	if !slices.Equal(sorted(got), sorted([]uuid.UUID{kept, marker[0]})) {
		t.Errorf("sent %v, want only the kept row %s and the marker %s", got, kept, marker[0])
	}
}

func TestOrderedAndFutureRowsAreLeftInTheTable(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	b.start(t)
	b.publish(t,
		relayer.NewOutgoing(Shipped{1}, relayer.Key("c1")),
		relayer.NewOutgoing(Placed{2}, relayer.DeliverAt(time.Now().Add(time.Hour))),
		relayer.NewOutgoing(Placed{3}),
	)
	b.waitSent(t, 1)
	rows := b.waitRows(t, 2)
	for _, r := range rows {
		if r.claimed || r.attempts != 0 {
			t.Errorf("row %s left for other workers was touched: %+v", r.id, r)
		}
	}
}

// TestTwoDispatchersNeverBothSend tells two dispatchers on the same tables about
// every commit; fenced claims let exactly one send each row.
func TestTwoDispatchersNeverBothSend(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{BatchSize: 7})
	other, err := dispatch.NewDirect(b.db, b.outbox, dispatch.DirectOptions{BatchSize: 5, Logger: slog.New(slog.NewTextHandler(b.logs, nil))})
	must(t, err)
	must(t, other.Start(context.Background()))
	t.Cleanup(func() { other.Stop(context.Background()) })
	b.start(t)
	both := fanout{b.direct, other}
	w, err := enlist.NewWriter(b.outbox, enlist.Options{Listener: both})
	must(t, err)
	const txs, per = 40, 5
	var wg sync.WaitGroup
	for i := range txs {
		wg.Go(func() {
			msgs := make([]relayer.Outgoing, per)
			for j := range msgs {
				msgs[j] = relayer.NewOutgoing(Placed{i*per + j})
			}
			must(t, w.RunInTx(context.Background(), b.db, nil, func(tx *enlist.Tx) error {
				return tx.PublishAll(context.Background(), msgs...)
			}))
		})
	}
	wg.Wait()
	b.waitSent(t, txs*per)
	b.waitRows(t, 0)
	seen := map[uuid.UUID]int{}
	for _, m := range b.mem.All() {
		seen[m.ID]++
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("row %s sent %d times", id, n)
		}
	}
	if len(seen) != txs*per {
		t.Errorf("sent %d distinct rows, want %d", len(seen), txs*per)
	}
	s1, s2 := b.direct.Stats(), other.Stats()
	if s1.Sent == 0 || s2.Sent == 0 {
		t.Logf("one dispatcher did all the work (%d / %d); the race was not exercised this run", s1.Sent, s2.Sent)
	}
}

type fanout []*dispatch.Direct

func (f fanout) Tables() store.Tables { return f[0].Tables() }
func (f fanout) Committed(rows []relayer.Message) error {
	var errs []error
	for _, d := range f {
		errs = append(errs, d.Committed(slices.Clone(rows)))
	}
	return errors.Join(errs...)
}

func TestSendFailureIsRecordedAndReleased(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	b.start(t)
	b.mem.FailWith(func(m *relayer.Message) error {
		if strings.Contains(string(m.Body), `"N":2`) {
			return errors.New("broker rejected N=2")
		}
		return nil
	})
	ids := b.publish(t, relayer.NewOutgoing(Placed{1}), relayer.NewOutgoing(Placed{2}), relayer.NewOutgoing(Placed{3}))
	b.waitSent(t, 2)
	rows := b.waitRows(t, 1)
	if rows[0].id != ids[1] || rows[0].attempts != 1 || rows[0].lastErr.String != "broker rejected N=2" || rows[0].claimed {
		t.Errorf("failed row = %+v, want attempts 1, the error, and no claim", rows[0])
	}
	// A whole-send failure on a single row.
	b.mem.FailWith(func(*relayer.Message) error { return errors.New("broker down") })
	id := b.publish(t, relayer.NewOutgoing(Billed{4}))
	testkit.Eventually(t, 10*time.Second, func() bool {
		rows = b.rows(t)
		return len(rows) == 2 && rows[1].attempts == 1
	}, "the single send's failure recorded")
	if len(rows) != 2 || rows[1].id != id[0] || rows[1].attempts != 1 || rows[1].lastErr.String != "broker down" || rows[1].claimed {
		t.Errorf("rows after a failed single send: %+v", rows)
	}
	// Released, each to wait for its retry: at most 1s (the default
	// backoff) after its failure.
	var waiting int
	must(t, b.db.QueryRow(`SELECT count(*) FROM "`+b.schema+`".ob_outbox WHERE retry_at > created_at`).Scan(&waiting))
	if n, _ := b.store.CountEligible(context.Background(), time.Now().Add(1100*time.Millisecond)); n != 2 || waiting != 2 {
		t.Errorf("eligible rows after the backoff = %d, with a retry time %d; want both failed rows released", n, waiting)
	}
}

func TestCompletionFailureRollsBackTheTake(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{ClaimDuration: time.Hour})
	// A deferred constraint trigger fails every transaction that deleted a row,
	// at its commit: the send has happened by then.
	_, err := b.db.Exec(`CREATE FUNCTION "` + b.schema + `".no_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'deletes are off'; END $$;
		CREATE CONSTRAINT TRIGGER no_delete AFTER DELETE ON "` + b.schema + `".ob_outbox
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "` + b.schema + `".no_delete()`)
	must(t, err)
	b.start(t)
	id := b.publish(t, relayer.NewOutgoing(Placed{1}), relayer.NewOutgoing(Placed{2}))
	b.waitSent(t, 2)
	testkit.Eventually(t, 10*time.Second, func() bool { return b.direct.Stats().CompletionFailures != 0 }, "a completion failure")
	rows := b.rows(t)
	if len(rows) != 2 || rows[0].id != id[0] || rows[1].id != id[1] {
		t.Fatalf("rows after a failed completion = %+v, want both sent rows back", rows)
	}
	for _, r := range rows {
		if r.claimed || r.attempts != 0 || r.lastErr.Valid {
			t.Errorf("row after a failed completion = %+v, want it unclaimed, attempts untouched", r)
		}
	}
	if st := b.direct.Stats(); st.CompletionFailures != 1 || st.Deleted != 0 || st.Sent != 2 {
		t.Errorf("stats = %+v, want 2 sent, none deleted, 1 completion failure", st)
	}
	if n, _ := b.store.CountEligible(context.Background(), time.Now()); n != 2 {
		t.Errorf("eligible = %d, want both rows eligible again for recovery", n)
	}
	if !strings.Contains(b.logs.String(), "completion failed after a successful send") {
		t.Errorf("no distinct completion-failure log in:\n%s", b.logs)
	}
}

// A worker whose session dies while it sends (a crash, a network cut, or the
// server ending a transaction idle past the claim) loses its take: the rows
// are back in the table untouched, the outcome is a completion failure, and
// the worker carries on with a new connection.
func TestTakeRollsBackWhenTheSessionDies(t *testing.T) {
	t.Parallel()
	db, app := testdb.OpenNamed(t, "pgx")
	b := setupOn(t, db, dispatch.DirectOptions{ClaimDuration: time.Minute})
	release := b.mem.Block(false)
	defer release()
	b.start(t)
	ids := b.publish(t, relayer.NewOutgoing(Placed{1}), relayer.NewOutgoing(Placed{2}))
	// Once the worker waits on the broker, its take's transaction open, end
	// that session from outside. (A session shows as idle in a transaction
	// as soon as the server sent the take's rows, before the worker read
	// them: killing it then fails the take itself, not the completion.)
	testkit.Eventually(t, 10*time.Second, func() bool { return b.mem.Waiting() != 0 }, "the worker waiting on the broker")
	killed := 0
	testkit.Eventually(t, 10*time.Second, func() bool {
		must(t, b.db.QueryRow(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'idle in transaction' AND query LIKE 'DELETE FROM%'
			  AND pid <> pg_backend_pid()`, app).Scan(&killed))
		return killed != 0
	}, "the worker's session idle in its take's transaction")
	if killed != 1 {
		t.Fatalf("terminated %d sessions idle in a transaction, want the worker's", killed)
	}
	release()
	b.waitSent(t, 2)
	testkit.Eventually(t, 10*time.Second, func() bool { return b.direct.Stats().CompletionFailures != 0 }, "a completion failure")
	if st := b.direct.Stats(); st.CompletionFailures != 1 || st.Deleted != 0 {
		t.Errorf("stats = %+v, want one completion failure and nothing deleted", st)
	}
	rows := b.rows(t)
	if len(rows) != 2 || rows[0].id != ids[0] || rows[1].id != ids[1] || rows[0].attempts != 0 || rows[1].attempts != 0 {
		t.Fatalf("rows after the session died = %+v, want both back untouched", rows)
	}
	// The worker goes on with a new connection.
	b.publish(t, relayer.NewOutgoing(Placed{3}))
	b.waitSent(t, 3)
	b.waitRows(t, 2)
}

// The direct worker chains its take transactions (COMMIT AND CHAIN) on both
// drivers, and ends the chain once idle, so that an idle worker's session is
// not left idle in a transaction.
func TestChainedTakesEndWhenIdle(t *testing.T) {
	t.Parallel()
	for _, driver := range testdb.Drivers() {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			db, app := testdb.OpenNamed(t, driver)
			b := setupOn(t, db, dispatch.DirectOptions{})
			b.start(t)
			for i := range 5 {
				b.publish(t, relayer.NewOutgoing(Placed{i}), relayer.NewOutgoing(Billed{i}))
				b.waitSent(t, 2*(i+1))
			}
			b.waitRows(t, 0)
			idleInTx := func() int {
				var n int
				must(t, db.QueryRow(`SELECT count(*) FROM pg_stat_activity
					WHERE application_name = $1 AND state = 'idle in transaction'`, app).Scan(&n))
				return n
			}
			if n := idleInTx(); n < 1 || n > dispatch.DirectWorkersDefault {
				t.Errorf("right after sending: %d sessions idle in a transaction, want the workers' chained ones (1 to %d)", n, dispatch.DirectWorkersDefault)
			}
			testkit.Eventually(t, 10*time.Second, func() bool { return idleInTx() == 0 }, "no session idle in a transaction after the worker went idle")
			// The next rows begin a new transaction.
			b.publish(t, relayer.NewOutgoing(Placed{9}))
			b.waitSent(t, 11)
			b.waitRows(t, 0)
		})
	}
}

func TestSkippedGroupsAreNotClaimedAndOthersGo(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	b.mem.SetCapabilitiesError("billing", errors.New("no such topic"))
	b.start(t)
	b.publish(t, relayer.NewOutgoing(Lost{1}), relayer.NewOutgoing(Billed{2}), relayer.NewOutgoing(Placed{3}))
	b.waitSent(t, 1)
	rows := b.waitRows(t, 2)
	for _, r := range rows {
		if r.claimed || r.attempts != 0 {
			t.Errorf("skipped row %s was claimed or charged an attempt: %+v", r.id, r)
		}
	}
	b.mem.SetCapabilities("billing", relayer.Capabilities{MaxBatchSize: 0})
	b.publish(t, relayer.NewOutgoing(Billed{4}), relayer.NewOutgoing(Placed{5}))
	b.waitSent(t, 2)
	rows = b.waitRows(t, 3)
	for _, r := range rows {
		if r.claimed || r.attempts != 0 {
			t.Errorf("skipped row %s was claimed or charged an attempt: %+v", r.id, r)
		}
	}
	if s := b.direct.Stats(); s.SkippedGroups != 3 {
		t.Errorf("skipped groups = %d, want 3", s.SkippedGroups)
	}
	for _, want := range []string{"transport not registered", "capability lookup failed", "MaxBatchSize 0 is not positive"} {
		if !strings.Contains(b.logs.String(), want) {
			t.Errorf("log lacks %q", want)
		}
	}
	// The failed lookup was not cached: once the destination works, it is asked again.
	b.mem.SetCapabilities("billing", relayer.Capabilities{MaxBatchSize: 10})
	b.publish(t, relayer.NewOutgoing(Billed{6}))
	b.waitSent(t, 3)
}

func TestBatchesAreBoundedBySizeAndEndpoint(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{BatchSize: 3})
	b.mem.SetCapabilities("billing", relayer.Capabilities{MaxBatchSize: 2})
	msgs := make([]relayer.Outgoing, 0, 12)
	for i := range 7 {
		msgs = append(msgs, relayer.NewOutgoing(Placed{i}))
	}
	for i := range 5 {
		msgs = append(msgs, relayer.NewOutgoing(Billed{i}))
	}
	b.publish(t, msgs...) // queued before start: one notification
	b.start(t)
	b.waitSent(t, 12)
	b.waitRows(t, 0)
	// placed: 3+3+1 (two batches, one single send); billing: 2+2+1.
	if n := b.mem.Sends(); n != 6 {
		t.Errorf("%d transport calls, want 6 (placed 3+3+1, billing 2+2+1)", n)
	}
}

func TestQueueFullAndStoppedReportPendingRows(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{QueueCapacity: 1})
	rows := []relayer.Message{{ID: uuid.New()}, {ID: uuid.New()}}
	must(t, b.direct.Committed(rows))
	err := b.direct.Committed(rows)
	if !errors.Is(err, dispatch.ErrQueueFull) || !strings.Contains(err.Error(), "2 committed rows left for recovery") {
		t.Errorf("Committed on a full queue = %v", err)
	}
	// Through the writer: the commit succeeds, the rows are counted.
	b.publish(t, relayer.NewOutgoing(Placed{1}), relayer.NewOutgoing(Placed{2}), relayer.NewOutgoing(Shipped{3}, relayer.Key("k")))
	if n := b.writer.LeftForRecovery(); n != 2 {
		t.Errorf("writer counted %d rows left for recovery, want the 2 unordered ones", n)
	}
	must(t, b.direct.Stop(context.Background()))
	err = b.direct.Committed(rows)
	if !errors.Is(err, dispatch.ErrStopped) || !strings.Contains(err.Error(), "2 committed rows") {
		t.Errorf("Committed after Stop = %v", err)
	}
	if n, _ := b.store.CountEligible(context.Background(), time.Now()); n != 3 {
		t.Errorf("%d rows in the table, want all 3 committed rows durable", n)
	}
}

func TestStopDrainsWithinTheDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{})
	b.mem.SetDelay(20 * time.Millisecond)
	for i := range 10 {
		b.publish(t, relayer.NewOutgoing(Placed{i}))
	}
	b.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.direct.Stop(ctx); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	if n := b.mem.Len(); n != 10 {
		t.Errorf("drained %d of 10 queued messages", n)
	}
	b.waitRows(t, 0)
}

func TestStopAbandonsATransportThatIgnoresCancellation(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{ClaimDuration: time.Hour})
	release := b.mem.Block(true)
	defer release()
	b.start(t)
	b.publish(t, relayer.NewOutgoing(Placed{1}))
	b.publish(t, relayer.NewOutgoing(Placed{2}))
	testkit.Eventually(t, 10*time.Second, func() bool { return b.mem.Waiting() != 0 }, "the first send hanging")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := b.direct.Stop(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop = %v, want DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Stop took %s past a 300ms deadline", took)
	}
	if rows := b.rows(t); len(rows) != 2 {
		t.Errorf("%d rows left, want both durable for recovery", len(rows))
	}
}

func TestExpiredClaimLeavesRowForRecovery(t *testing.T) {
	t.Parallel()
	b := setup(t, dispatch.DirectOptions{ClaimDuration: 200 * time.Millisecond})
	release := b.mem.Block(true) // the broker hangs past the claim
	b.start(t)
	id := b.publish(t, relayer.NewOutgoing(Placed{1}))
	testkit.Eventually(t, 10*time.Second, func() bool { return b.direct.Stats().Expired != 0 }, "the send abandoned at its claim's expiry")
	release()
	rows := b.rows(t)
	if len(rows) != 1 || rows[0].id != id[0] || rows[0].attempts != 0 {
		t.Fatalf("rows = %+v, want the row kept with attempts untouched (its claim expired)", rows)
	}
	if n, _ := b.store.CountEligible(context.Background(), time.Now()); n != 1 {
		t.Errorf("eligible = %d: the expired claim must make the row eligible for recovery", n)
	}
	// A second notification finds the destination set aside after its
	// timeout: direct dispatch leaves the row to recovery, untouched.
	left := b.direct.Stats().LeftForRecovery
	must(t, b.direct.Committed([]relayer.Message{{ID: id[0], Transport: "mem", Destination: "orders.placed"}}))
	testkit.Eventually(t, 5*time.Second, func() bool { return b.direct.Stats().LeftForRecovery != left }, "the row left for recovery")
	if got := b.direct.Stats().LeftForRecovery; got != left+1 {
		t.Errorf("LeftForRecovery = %d after notifying a set-aside destination, want %d", got, left+1)
	}
	if rows := b.rows(t); len(rows) != 1 || rows[0].attempts != 0 {
		t.Errorf("rows = %+v, want the row kept untouched", rows)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opts  dispatch.DirectOptions
		field string
	}{
		{dispatch.DirectOptions{QueueCapacity: -1}, "QueueCapacity"},
		{dispatch.DirectOptions{BatchSize: -1}, "BatchSize"},
		{dispatch.DirectOptions{BatchSize: dispatch.BatchSizeMax + 1}, "BatchSize"},
		{dispatch.DirectOptions{ClaimDuration: -time.Second}, "ClaimDuration"},
		{dispatch.DirectOptions{Workers: -1}, "Workers"},
		{dispatch.DirectOptions{Workers: dispatch.DirectWorkersMax + 1}, "Workers"},
	} {
		err := c.opts.Validate()
		if !errors.Is(err, dispatch.ErrInvalidOptions) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", c.opts, err, c.field)
		}
		if _, err := dispatch.NewDirect(&sql.DB{}, relayer.Outbox{}, c.opts); !errors.Is(err, dispatch.ErrInvalidOptions) {
			t.Errorf("NewDirect(%+v) = %v", c.opts, err)
		}
	}
	for _, c := range []struct {
		m     map[string]string
		field string
	}{
		{map[string]string{"QueueCapacity": "many"}, "QueueCapacity"},
		{map[string]string{"BatchSize": "0"}, "BatchSize"},
		{map[string]string{"BatchSize": "-5"}, "BatchSize"},
		{map[string]string{"ClaimDuration": "30"}, "ClaimDuration"},
		{map[string]string{"ClaimDuration": "-1s"}, "ClaimDuration"},
		{map[string]string{"Workers": "0"}, "Workers"},
		{map[string]string{"Workers": "two"}, "Workers"},
	} {
		if _, err := dispatch.LoadDirectOptions(dispatch.MapSource(c.m)); !errors.Is(err, dispatch.ErrInvalidOptions) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("LoadDirectOptions(%v) = %v, want an error naming %s", c.m, err, c.field)
		}
	}
	o, err := dispatch.LoadDirectOptions(dispatch.MapSource(map[string]string{"QueueCapacity": "64", "ClaimDuration": "1m30s"}))
	if err != nil || o.QueueCapacity != 64 || o.ClaimDuration != 90*time.Second || o.BatchSize != 0 || o.Workers != 0 {
		t.Errorf("LoadDirectOptions = %+v, %v", o, err)
	}
	b := setup(t, o)
	if eff := b.direct.Options(); eff.QueueCapacity != 64 || eff.BatchSize != dispatch.BatchSizeDefault || eff.ClaimDuration != 90*time.Second ||
		eff.Workers != dispatch.DirectWorkersDefault {
		t.Errorf("effective options %+v", eff)
	}
	if o, err := dispatch.LoadDirectOptions(dispatch.MapSource(map[string]string{"Workers": "3"})); err != nil || o.Workers != 3 {
		t.Errorf("LoadDirectOptions(Workers=3) = %+v, %v", o, err)
	}
	if _, err := dispatch.NewDirect(nil, relayer.Outbox{}, dispatch.DirectOptions{}); !errors.Is(err, store.ErrNilDB) {
		t.Errorf("NewDirect(nil db) = %v", err)
	}
	if _, err := dispatch.NewDirect(&sql.DB{}, relayer.Outbox{Transports: map[string]relayer.Transport{"x": nil}}, dispatch.DirectOptions{}); !errors.Is(err, dispatch.ErrInvalidOptions) {
		t.Errorf("NewDirect with a nil transport = %v", err)
	}
	if _, err := dispatch.NewDirect(&sql.DB{}, relayer.Outbox{Schema: "Bad"}, dispatch.DirectOptions{}); !errors.Is(err, store.ErrInvalidOptions) {
		t.Errorf("NewDirect with a bad schema = %v", err)
	}
}

// TestOptionsFromEnvironment cannot run in parallel: it sets variables.
func TestOptionsFromEnvironment(t *testing.T) {
	t.Setenv("ORDERS_DIRECT_BATCH_SIZE", "250")
	t.Setenv("ORDERS_DIRECT_CLAIM_DURATION", "45s")
	o, err := dispatch.LoadDirectOptions(dispatch.EnvSource("ORDERS_DIRECT_"))
	if err != nil || o.BatchSize != 250 || o.ClaimDuration != 45*time.Second || o.QueueCapacity != 0 {
		t.Errorf("from the environment: %+v, %v", o, err)
	}
	t.Setenv("ORDERS_DIRECT_QUEUE_CAPACITY", "x")
	if _, err := dispatch.LoadDirectOptions(dispatch.EnvSource("ORDERS_DIRECT_")); err == nil || !strings.Contains(err.Error(), "QueueCapacity") {
		t.Errorf("bad variable: %v", err)
	}
}
