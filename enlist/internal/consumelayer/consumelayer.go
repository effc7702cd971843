// Package consumelayer checks a data layer's consumers (consume.NewTx
// wrapped by relayergorm, relayerbun, relayersqlx): that the handler's
// writes through the layer's transaction, the inbox record and the
// follow-up messages it publishes commit together or not at all, and that
// a redelivery is a duplicate.
package consumelayer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

// Tx is the layer's transaction as the scenarios use it.
type Tx interface {
	// Exec runs a statement with $n placeholders in the transaction.
	Exec(ctx context.Context, query string, args ...any) error
	// Publish publishes a follow-up message in the transaction.
	Publish(ctx context.Context, msg any) error
}

// Handler is a scenario's handler over the layer's transaction.
type Handler func(ctx context.Context, tx Tx, m *relayer.Message) error

// Layer is a data layer's consumer under test.
type Layer struct {
	// Driver is the database/sql driver to open the database with.
	Driver string
	// Consumer returns a consumer named "billing" on db and tables whose
	// handler runs h with the layer's transaction; w, when not nil, is the
	// writer its follow-ups publish through.
	Consumer func(t *testing.T, db *sql.DB, tables store.Tables, w *enlist.Writer, h Handler) *consume.Consumer
}

// FollowUp is the message the scenarios' handlers publish.
type FollowUp struct{ Of string }

// MessageType names FollowUp's type.
func (FollowUp) MessageType() string { return "consumelayer.FollowUp" }

// Run runs the scenarios against l, in parallel.
func Run(t *testing.T, l Layer) {
	t.Helper()
	for _, s := range []struct {
		name string
		run  func(*testing.T, Layer)
	}{
		{"HandledOnceThenDuplicate", handledOnceThenDuplicate},
		{"FailureRollsBackWritesAndInbox", failureRollsBackWritesAndInbox},
		{"CheckNamesTheMigration", checkNamesTheMigration},
		{"InboxAwaySpendsNoAttempt", inboxAwaySpendsNoAttempt},
		{"AFailingKeyIsHeld", aFailingKeyIsHeld},
		{"FollowUpsCommitWithTheHandler", followUpsCommitWithTheHandler},
	} {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			s.run(t, l)
		})
	}
}

func handledOnceThenDuplicate(t *testing.T, l Layer) {
	b := setup(t, l.Driver)
	c := l.Consumer(t, b.db, b.tables, nil, b.writeEffect)
	m := newMessage()
	for i := range 2 {
		if out, err := c.Handle(context.Background(), &delivery{msg: m}); err != nil {
			t.Fatalf("delivery %d: %s, %v", i+1, out, err)
		}
	}
	if st := c.Stats(); st.Handled != 1 || st.Duplicates != 1 || b.count(t, "effects") != 1 || b.count(t, b.tables.TablePrefix+"inbox") != 1 {
		t.Errorf("%+v, %d effect rows, %d inbox rows; want one of each", st, b.count(t, "effects"), b.count(t, b.tables.TablePrefix+"inbox"))
	}
}

func failureRollsBackWritesAndInbox(t *testing.T, l Layer) {
	b := setup(t, l.Driver)
	c := l.Consumer(t, b.db, b.tables, nil, func(ctx context.Context, tx Tx, m *relayer.Message) error {
		if err := b.writeEffect(ctx, tx, m); err != nil {
			return err
		}
		return errors.New("after the write")
	})
	d := &delivery{msg: newMessage()}
	if out, _ := c.Handle(context.Background(), d); out != consume.Retried || d.retries != 1 {
		t.Fatalf("Handle = %s, %d retries; want retried", out, d.retries)
	}
	if n, ib := b.count(t, "effects"), b.count(t, b.tables.TablePrefix+"inbox"); n != 0 || ib != 0 {
		t.Errorf("%d effect rows, %d inbox rows after a failure; want none", n, ib)
	}
}

func checkNamesTheMigration(t *testing.T, l Layer) {
	b := setup(t, l.Driver)
	ctx := context.Background()
	if err := l.Consumer(t, b.db, b.tables, nil, b.writeEffect).Check(ctx); err != nil {
		t.Fatalf("Check on migrated tables = %v", err)
	}
	none := store.Tables{Schema: b.tables.Schema + "_none"}
	err := l.Consumer(t, b.db, none, nil, b.writeEffect).Check(ctx)
	if !errors.Is(err, consume.ErrNotReady) || !strings.Contains(err.Error(), "relayer migrate --database-url URL --schema "+none.Schema) {
		t.Fatalf("Check on a schema never migrated = %v; want consume.ErrNotReady naming relayer migrate", err)
	}
}

func inboxAwaySpendsNoAttempt(t *testing.T, l Layer) {
	b := setup(t, l.Driver)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inbox := `"` + b.tables.Schema + `"."` + b.tables.TablePrefix + `inbox"`
	away := b.tables.TablePrefix + "inbox_away"
	c := l.Consumer(t, b.db, b.tables, nil, b.writeEffect)
	if _, err := b.db.ExecContext(ctx, `ALTER TABLE `+inbox+` RENAME TO "`+away+`"`); err != nil {
		t.Fatal(err)
	}
	d := &delivery{msg: newMessage()}
	type result struct {
		out consume.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := c.Handle(ctx, d)
		done <- result{out, err}
	}()
	testkit.Eventually(t, 15*time.Second, func() bool { return c.Stats().DatabaseWaits != 0 || len(done) != 0 }, "the delivery waiting for the inbox table")
	if len(done) != 0 {
		r := <-done
		t.Fatalf("Handle with the inbox table away = %s, %v; want it to wait for the table", r.out, r.err)
	}
	if _, err := b.db.ExecContext(ctx, `ALTER TABLE "`+b.tables.Schema+`"."`+away+`" RENAME TO "`+b.tables.TablePrefix+`inbox"`); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.out != consume.Handled || r.err != nil || d.retries != 0 || d.dead != 0 {
		t.Fatalf("Handle once the table is back = %s, %v (%d retries, %d dead letters); want handled", r.out, r.err, d.retries, d.dead)
	}
	if n := b.count(t, "effects"); n != 1 {
		t.Errorf("%d effect rows, want 1", n)
	}
}

func aFailingKeyIsHeld(t *testing.T, l Layer) {
	b := setup(t, l.Driver)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	table := `"` + b.tables.Schema + `".held_effects`
	if _, err := b.db.ExecContext(ctx, `CREATE TABLE `+table+` (seq bigserial PRIMARY KEY, note text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	var failed atomic.Bool
	c := l.Consumer(t, b.db, b.tables, nil, func(ctx context.Context, tx Tx, m *relayer.Message) error {
		if string(m.Body) == "k1" && !failed.Swap(true) {
			return errors.New("ledger busy")
		}
		return tx.Exec(ctx, `INSERT INTO `+table+` (note) VALUES ($1)`, string(m.Body))
	})
	stop, err := c.StartHeldKeys(ctx, consume.HeldKeysOptions{Ordered: true, DeadLetters: noDeadLetters{t}, Poll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, body := range []string{"k1", "k2"} {
		m := newMessage()
		m.Key, m.Body = "k", []byte(body)
		want := map[string]consume.Outcome{"k1": consume.Held, "k2": consume.Waiting}[body]
		if out, err := c.Handle(ctx, &delivery{msg: m}); out != want || err != nil {
			t.Fatalf("%s: Handle = %s, %v; want %s", body, out, err, want)
		}
	}
	testkit.Eventually(t, 15*time.Second, func() bool { return b.count(t, "held_effects") >= 2 }, "the held key drained")
	var notes string
	if err := b.db.QueryRowContext(ctx, `SELECT string_agg(note, ' ' ORDER BY seq) FROM `+table).Scan(&notes); err != nil || notes != "k1 k2" {
		t.Errorf("effects %q (%v); want k1 k2, in order", notes, err)
	}
}

func followUpsCommitWithTheHandler(t *testing.T, l Layer) {
	b := setup(t, l.Driver)
	var routes relayer.Routes
	if err := relayer.AddType[FollowUp](&routes, relayer.Route{Transport: "broker", Destination: "follow-ups"}); err != nil {
		t.Fatal(err)
	}
	w, err := enlist.NewWriter(relayer.Outbox{Schema: b.tables.Schema, TablePrefix: b.tables.TablePrefix, Routes: &routes}, enlist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := l.Consumer(t, b.db, b.tables, w, func(ctx context.Context, tx Tx, m *relayer.Message) error {
		if err := b.writeEffect(ctx, tx, m); err != nil {
			return err
		}
		if err := tx.Publish(ctx, FollowUp{Of: m.ID.String()}); err != nil {
			return err
		}
		if string(m.Body) == "bad" {
			return fmt.Errorf("rejected after publishing: %w", relayer.ErrPermanent)
		}
		return nil
	})
	ok, bad := newMessage(), newMessage()
	bad.Body = []byte("bad")
	if out, err := c.Handle(context.Background(), &delivery{msg: ok}); out != consume.Handled || err != nil {
		t.Fatalf("Handle = %s, %v", out, err)
	}
	if out, _ := c.Handle(context.Background(), &delivery{msg: bad}); out != consume.DeadLettered {
		t.Fatalf("Handle = %s, want dead-lettered", out)
	}
	if n, out := b.count(t, "effects"), b.count(t, b.tables.TablePrefix+"outbox"); n != 1 || out != 1 {
		t.Errorf("%d effect rows, %d follow-ups in the outbox; want the handled message's alone", n, out)
	}
}

// bundle is a scenario's database: outbox tables (the inbox among them)
// and an effects table in a schema of its own.
type bundle struct {
	db     *sql.DB
	tables store.Tables
}

func setup(t *testing.T, driver string) *bundle {
	t.Helper()
	db := testdb.Open(t, driver)
	tables := store.Tables{Schema: testdb.NewSchema(t), TablePrefix: "c_"}
	ctx := context.Background()
	if _, err := store.Migrate(ctx, db, tables); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE "`+tables.Schema+`".effects (message_id uuid NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &bundle{db: db, tables: tables}
}

func (b *bundle) writeEffect(ctx context.Context, tx Tx, m *relayer.Message) error {
	return tx.Exec(ctx, `INSERT INTO "`+b.tables.Schema+`".effects (message_id) VALUES ($1)`, m.ID)
}

// count returns the rows of table in the scenario's schema, read outside
// any transaction.
func (b *bundle) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := b.db.QueryRow(`SELECT count(*) FROM "` + b.tables.Schema + `"."` + table + `"`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func newMessage() relayer.Message {
	return relayer.Message{ID: uuid.Must(relayer.NewID()), Type: "orders.Placed", Destination: "orders", Body: []byte("ok")}
}

// noDeadLetters fails the test when a held message is dead-lettered.
type noDeadLetters struct{ t *testing.T }

func (d noDeadLetters) DeadLetter(_ context.Context, m *relayer.Message, cause error) error {
	d.t.Errorf("message %s dead-lettered: %v", m.Body, cause)
	return nil
}

// delivery is a broker message that records how it was settled.
type delivery struct {
	msg                 relayer.Message
	acks, retries, dead int
}

func (d *delivery) Message() (relayer.Message, error)          { return d.msg, nil }
func (d *delivery) Attempt() int                               { return 1 }
func (d *delivery) Ack(context.Context) error                  { d.acks++; return nil }
func (d *delivery) Retry(context.Context, time.Duration) error { d.retries++; return nil }
func (d *delivery) DeadLetter(context.Context, error) error    { d.dead++; return nil }
