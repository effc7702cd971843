// Package consolefixture fills an outbox with a little of everything an
// operator's console shows: due, scheduled and retrying rows over several
// destinations, parked keys, dead letters of several reasons, lane and
// member leases, a paused destination, and stored text that a page must
// escape. The console's tests and its browser test share it.
package consolefixture

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// XSS is stored in keys and errors: a page that prints it unescaped runs it.
const XSS = `<script>alert("x")</script>`

// Body is every message's body; it holds an e-mail address, which a console
// shows only when asked to.
const Body = `{"order":"o-1","email":"a@example.com"}`

// Fixture is a filled outbox.
type Fixture struct {
	DB    *sql.DB
	Opts  store.Tables
	Store *store.Store
	// Plain is a due unordered row.
	Plain relayer.Message
	// Parked heads their keys; Behind waits behind Parked[0]. Parked[0]'s
	// key holds XSS.
	Parked []relayer.Message
	Behind relayer.Message
	// Dead are dead letters: Dead[0] and Dead[1] of type audit.Logged.
	Dead []relayer.Message
}

func message(typ, transport, dest, key string) relayer.Message {
	m := relayer.Message{ID: uuid.Must(relayer.NewID()), Type: typ, Transport: transport, Destination: dest,
		Body: []byte(Body),
		Headers: []headers.Header{
			{Name: "content-type", Value: []byte("application/json")},
			{Name: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
			{Name: "bin", Value: []byte{0, 1, 2}},
		}}
	if key != "" {
		m.Key, m.Ordered = key, true
		m.Lane, _ = relayer.Lane(key, relayer.LanesDefault)
	}
	return m
}

// Seed fills the migrated outbox opts on db.
func Seed(t testing.TB, db *sql.DB, opts store.Tables) *Fixture {
	t.Helper()
	st, err := workerstore.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	f := &Fixture{DB: db, Opts: opts, Store: st.Store}
	now := time.Now()
	retrying := f.insertRows(t, st, now)
	f.parkAndFail(t, st, retrying, now)
	f.bury(t, st, now)
	seedWorkers(t, st, now)
	return f
}

// insertRows inserts the outbox's rows, and returns the one that fails.
func (f *Fixture) insertRows(t testing.TB, st *workerstore.Store, now time.Time) relayer.Message {
	t.Helper()
	ctx := context.Background()
	var rows []relayer.Message
	f.Plain = message("orders.Placed", "nats", "orders.placed", "")
	rows = append(rows, f.Plain)
	for i := range 40 {
		m := message("orders.Placed", "nats", "orders.placed", "")
		if i%4 == 0 {
			m.Type, m.Destination = "billing.Invoiced", "billing.invoices"
		}
		rows = append(rows, m)
	}
	for i := range 6 {
		m := message("billing.Reminder", "nats", "billing.reminders", "")
		m.DeliverAt = now.Add(time.Duration(i+1) * time.Hour)
		rows = append(rows, m)
	}
	for i := range 24 {
		rows = append(rows, message("customers.Activity", "kafka", "customer-activity", fmt.Sprintf("customer-%d", i%8)))
	}
	f.Parked = []relayer.Message{
		message("ledger.Posted", "nats", "ledger", "account-"+XSS),
		message("ledger.Posted", "nats", "ledger", "account-77"),
		message("customers.Activity", "kafka", "customer-activity", "customer-999"),
	}
	f.Behind = message("ledger.Posted", "nats", "ledger", "account-"+XSS)
	rows = append(rows, f.Parked...)
	rows = append(rows, f.Behind)
	f.Dead = []relayer.Message{
		message("audit.Logged", "nats", "audit", ""),
		message("audit.Logged", "nats", "audit", ""),
		message("emails.Send", "amqp", "emails", ""),
		message("emails.Send", "amqp", "emails", ""),
	}
	rows = append(rows, f.Dead...)
	retrying := message("emails.Send", "amqp", "emails", "")
	rows = append(rows, retrying)
	if err := st.Insert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	return retrying

}

// parkAndFail parks the heads of f.Parked and fails retrying, to be tried
// again in 10 minutes.
func (f *Fixture) parkAndFail(t testing.TB, st *workerstore.Store, retrying relayer.Message, now time.Time) {
	t.Helper()
	ctx := context.Background()
	c := store.NewClaim(now, time.Minute)
	ids := []uuid.UUID{retrying.ID}
	for _, m := range f.Parked {
		ids = append(ids, m.ID)
	}
	if claimed, err := st.ClaimBatch(ctx, nil, ids[1:], c, now); err != nil || len(claimed) != len(f.Parked) {
		t.Fatalf("consolefixture: claim the heads to park: %d, %v", len(claimed), err)
	}
	failures := []store.Failure{
		{ID: f.Parked[0].ID, Error: "rejected by the ledger: " + XSS},
		{ID: f.Parked[1].ID, Error: "account 77 is closed"},
		{ID: f.Parked[2].ID, Error: "message too large (1.2 MB, limit 1 MB)"},
	}
	if n, err := st.Park(ctx, failures, c.Token, now); err != nil || n != int64(len(failures)) {
		t.Fatalf("consolefixture: park: %d, %v", n, err)
	}
	if _, err := st.ClaimBatch(ctx, nil, ids[:1], c, now); err != nil {
		t.Fatalf("consolefixture: claim the retrying row: %v", err)
	}
	if n, err := st.FailBatch(ctx, []store.Failure{{ID: retrying.ID, Error: "SMTP 451: try again later", RetryAt: now.Add(10 * time.Minute)}}, c.Token, now); err != nil || n != 1 {
		t.Fatalf("consolefixture: fail: %d, %v", n, err)
	}
}

// bury moves f.Dead to the dead letters, with their reasons.
func (f *Fixture) bury(t testing.TB, st *workerstore.Store, now time.Time) {
	t.Helper()
	ctx := context.Background()
	tx, err := f.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	tst, err := st.With(tx)
	if err != nil {
		t.Fatal(err)
	}
	deadIDs := make([]uuid.UUID, len(f.Dead))
	for i, m := range f.Dead {
		deadIDs[i] = m.ID
	}
	if taken, err := tst.TakeIDs(ctx, nil, deadIDs, now.Add(time.Hour)); err != nil || len(taken) != len(f.Dead) {
		t.Fatalf("consolefixture: take the dead: %d, %v", len(taken), err)
	}
	dead := []store.Row{
		{Message: f.Dead[0], Attempts: 10, LastError: "schema " + XSS},
		{Message: f.Dead[1], Attempts: 10, LastError: "no such stream"},
		{Message: f.Dead[2], Attempts: 1, LastError: "550 mailbox unavailable"},
		{Message: f.Dead[3], Attempts: 0, LastError: "no route for type emails.Send"},
	}
	reasons := []string{store.ReasonExhausted, store.ReasonExhausted, store.ReasonPermanent, store.ReasonPermanent}
	if err := tst.Bury(ctx, dead, reasons); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// seedWorkers records two ordered workers sharing the lanes, recovery, and
// a paused destination.
func seedWorkers(t testing.TB, st *workerstore.Store, now time.Time) {
	t.Helper()
	ctx := context.Background()
	for i, owner := range []string{"billing-7f9c ordered-1", "billing-2b41 ordered-1"} {
		token := uuid.New()
		member := workerstore.Lease{Name: workerstore.MemberLeaseName(fmt.Sprintf("instance-%d", i)), Owner: owner, Token: token}
		if _, _, err := st.AcquireLease(ctx, member, time.Minute); err != nil {
			t.Fatal(err)
		}
		var lanes []int
		var owners []string
		for l := i * relayer.LanesDefault / 2; l < (i+1)*relayer.LanesDefault/2; l++ {
			lanes = append(lanes, l)
			owners = append(owners, owner)
		}
		if _, err := st.AcquireLaneLeasesFor(ctx, lanes, owners, token, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := st.AcquireLease(ctx, workerstore.Lease{Name: "recovery", Owner: "billing-7f9c recovery", Token: uuid.New()}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	pause := store.Pause{Transport: "amqp", Destination: "emails", Since: now.Add(-90 * time.Second), NextProbe: now.Add(8 * time.Second),
		LastError: "amqp: connection refused (broker unavailable)"}
	if err := st.PublishPauses(ctx, uuid.New(), "billing-7f9c", []store.Pause{pause}); err != nil {
		t.Fatal(err)
	}
}
