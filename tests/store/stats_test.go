package store_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

// statsOutbox is a migrated outbox for the Stats tests, with helpers that put
// rows into each of the classes Stats tells apart.
type statsOutbox struct {
	db     *sql.DB
	store  *workerstore.Store
	outbox string // qualified, quoted table names
	dead   string
	t0     time.Time
}

func newStatsOutbox(t *testing.T, driver string) *statsOutbox {
	t.Helper()
	db := testdb.Open(t, driver)
	opts := store.Tables{Schema: testdb.NewSchema(t), TablePrefix: "st_"}
	if _, err := store.Migrate(context.Background(), db, opts); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	s, err := workerstore.New(db, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	q := `"` + opts.Schema + `"."` + opts.TablePrefix
	return &statsOutbox{db: db, store: s, outbox: q + `outbox"`, dead: q + `dead"`,
		t0: time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)}
}

// add inserts one message created at created, delivered no earlier than
// deliverAt (zero for immediately), ordered under key when key is not empty.
func (o *statsOutbox) add(t *testing.T, created, deliverAt time.Time, key string) uuid.UUID {
	t.Helper()
	id, err := relayer.NewID()
	if err != nil {
		t.Fatal(err)
	}
	m := relayer.Message{ID: id, Type: "t", Body: []byte("{}"), Transport: "mem", Destination: "d",
		CreatedAt: created, DeliverAt: deliverAt}
	if key != "" {
		lane, err := relayer.Lane(key, 16)
		if err != nil {
			t.Fatal(err)
		}
		m.Key, m.Ordered, m.Lane = key, true, lane
	}
	if err := o.store.Insert(context.Background(), []relayer.Message{m}); err != nil {
		t.Fatalf("Insert: %v", err)
	}
	return id
}

func (o *statsOutbox) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	if _, err := o.db.Exec(query, args...); err != nil {
		t.Fatalf("exec %q: %v", query, err)
	}
}

func (o *statsOutbox) stats(t *testing.T, now time.Time) store.Stats {
	t.Helper()
	st, err := o.store.Stats(context.Background(), now)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return st
}

func eachStatsDriver(t *testing.T, f func(t *testing.T, o *statsOutbox)) {
	t.Helper()
	for _, driver := range testdb.Drivers() {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			f(t, newStatsOutbox(t, driver))
		})
	}
}

func TestStatsEmpty(t *testing.T) {
	t.Parallel()
	eachStatsDriver(t, func(t *testing.T, o *statsOutbox) {
		if got := o.stats(t, o.t0); got != (store.Stats{}) {
			t.Fatalf("Stats of an empty outbox = %+v, want all zero", got)
		}
	})
}

func TestStatsClasses(t *testing.T) {
	t.Parallel()
	eachStatsDriver(t, func(t *testing.T, o *statsOutbox) {
		ctx := context.Background()
		t0 := o.t0
		// Eligible: created 10m ago but due only 1m ago; created 5m ago, due at
		// once; due exactly now; an expired claim; an ordered row.
		o.add(t, t0.Add(-10*time.Minute), t0.Add(-time.Minute), "")
		o.add(t, t0.Add(-5*time.Minute), time.Time{}, "")
		o.add(t, t0.Add(-time.Second), t0, "")
		expired := o.add(t, t0.Add(-2*time.Minute), time.Time{}, "")
		o.add(t, t0.Add(-3*time.Minute), time.Time{}, "k0")
		// Scheduled: due a microsecond after now, and in an hour.
		o.add(t, t0.Add(-30*time.Minute), t0.Add(time.Microsecond), "")
		o.add(t, t0, t0.Add(time.Hour), "k0")
		// Claimed: a claim living past now.
		live := o.add(t, t0.Add(-20*time.Minute), time.Time{}, "")
		claim := store.Claim{Token: uuid.New(), Until: t0.Add(time.Minute)}
		if ok, err := o.store.Claim(ctx, live, claim, t0.Add(-time.Minute)); err != nil || !ok {
			t.Fatalf("Claim = %v, %v", ok, err)
		}
		short := store.Claim{Token: uuid.New(), Until: t0}
		if ok, err := o.store.Claim(ctx, expired, short, t0.Add(-time.Minute)); err != nil || !ok {
			t.Fatalf("Claim = %v, %v", ok, err)
		}
		// Retrying: a failed row whose retry time is a minute ahead; one whose
		// retry time is exactly now is eligible.
		retrying := o.add(t, t0.Add(-6*time.Minute), time.Time{}, "")
		retried := o.add(t, t0.Add(-4*time.Minute), time.Time{}, "")
		o.exec(t, `UPDATE `+o.outbox+` SET retry_at = $1, attempts = 1 WHERE id = $2`, t0.Add(time.Minute), retrying)
		o.exec(t, `UPDATE `+o.outbox+` SET retry_at = $1, attempts = 1 WHERE id = $2`, t0, retried)
		// Parked: three rows of two ordered keys, and one unordered row. They are
		// the oldest rows, and due, but must count only as parked.
		var parked []uuid.UUID
		for _, key := range []string{"p1", "p1", "p2", ""} {
			parked = append(parked, o.add(t, t0.Add(-time.Hour), time.Time{}, key))
		}
		o.exec(t, `UPDATE `+o.outbox+` SET parked_at = $1 WHERE id = ANY($2::uuid[])`,
			t0.Add(-time.Minute), uuidLiteral(parked))
		o.exec(t, `INSERT INTO `+o.dead+` (id, message_type, transport, destination, body, headers,
    created_at, attempts, reason)
SELECT gen_random_uuid(), 't', 'mem', 'd', '\x'::bytea, '\x0100000000000000'::bytea, $1, 3, 'retries exhausted'
FROM generate_series(1, 2)`, t0)

		got := o.stats(t, t0)
		want := store.Stats{
			Eligible:        6,
			Scheduled:       2,
			Claimed:         1,
			Retrying:        1,
			NextRetryAt:     t0.Add(time.Minute),
			Parked:          4,
			OldestParkedAt:  t0.Add(-time.Minute),
			ParkedKeys:      2,
			Dead:            2,
			OldestCreatedAt: t0.Add(-10 * time.Minute),
			OldestDueAt:     t0.Add(-5 * time.Minute),
		}
		if got != want {
			t.Fatalf("Stats =\n%+v, want\n%+v", got, want)
		}
		if n, err := o.store.CountEligible(ctx, t0); err != nil || n != got.Eligible {
			t.Fatalf("CountEligible = %d, %v; Stats.Eligible = %d", n, err, got.Eligible)
		}
		var total int64
		if err := o.db.QueryRow(`SELECT count(*) FROM ` + o.outbox).Scan(&total); err != nil {
			t.Fatal(err)
		}
		if sum := got.Eligible + got.Scheduled + got.Claimed + got.Retrying + got.Parked; sum != total {
			t.Fatalf("classes sum to %d, the table holds %d rows", sum, total)
		}

		// An hour later every schedule is due and every claim has expired.
		later := o.stats(t, t0.Add(time.Hour))
		if later.Eligible != 10 || later.Scheduled != 0 || later.Claimed != 0 || later.Retrying != 0 || later.Parked != 4 {
			t.Fatalf("Stats an hour later = %+v, want 10 eligible, 4 parked, none scheduled, claimed or retrying", later)
		}
		if want := t0.Add(-30 * time.Minute); !later.OldestCreatedAt.Equal(want) {
			t.Fatalf("OldestCreatedAt an hour later = %s, want the formerly scheduled row's %s", later.OldestCreatedAt, want)
		}
		if want := t0.Add(-20 * time.Minute); !later.OldestDueAt.Equal(want) {
			t.Fatalf("OldestDueAt an hour later = %s, want the formerly claimed row's %s", later.OldestDueAt, want)
		}
	})
}

// TestStatsInTransaction checks that a store bound with With runs Stats in
// the caller's transaction, seeing its uncommitted rows.
func TestStatsInTransaction(t *testing.T) {
	t.Parallel()
	o := newStatsOutbox(t, "pgx")
	ctx := context.Background()
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	bound, err := o.store.With(tx)
	if err != nil {
		t.Fatal(err)
	}
	m := relayer.Message{ID: uuid.Must(relayer.NewID()), Type: "t", Body: []byte("{}"), Transport: "mem",
		Destination: "d", CreatedAt: o.t0}
	if err := bound.Insert(ctx, []relayer.Message{m}); err != nil {
		t.Fatal(err)
	}
	in, err := bound.Stats(ctx, o.t0)
	if err != nil {
		t.Fatal(err)
	}
	if in.Eligible != 1 {
		t.Fatalf("Stats in the transaction: Eligible = %d, want 1", in.Eligible)
	}
	if out := o.stats(t, o.t0); out.Eligible != 0 {
		t.Fatalf("Stats outside the transaction: Eligible = %d, want 0", out.Eligible)
	}
}

func TestStatsErrors(t *testing.T) {
	t.Parallel()
	o := newStatsOutbox(t, "pgx")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	st, err := o.store.Stats(ctx, o.t0)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Stats with a cancelled context = %+v, %v; want context.Canceled", st, err)
	}

	missing, err := workerstore.New(o.db, store.Tables{Schema: "no_such_schema_for_stats"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := missing.Stats(context.Background(), o.t0); err == nil {
		t.Fatal("Stats on missing tables succeeded")
	}
}

// uuidLiteral renders ids as a PostgreSQL array literal, the form the store's
// statements take arrays in.
func uuidLiteral(ids []uuid.UUID) string {
	b := []byte{'{'}
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, id.String()...)
	}
	return string(append(b, '}'))
}
