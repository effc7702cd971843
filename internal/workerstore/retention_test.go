package workerstore

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer/internal/storesql"
	"github.com/relayer-go/relayer/internal/tables"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

// retentionFixture is a migrated outbox on one driver, with helpers that write
// inbox and dead-letter rows at chosen instants.
type retentionFixture struct {
	db *sql.DB
	s  *Store
	n  tables.Names
}

func newRetentionFixture(t *testing.T, driver, prefix string) *retentionFixture {
	t.Helper()
	db := testdb.Open(t, driver)
	opts := store.Tables{Schema: testdb.NewSchema(t), TablePrefix: prefix}
	if _, err := store.Migrate(context.Background(), db, opts); err != nil {
		t.Fatal(err)
	}
	s, err := New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &retentionFixture{db: db, s: s, n: namesOf(s)}
}

// eachRetentionDriver runs f per driver in parallel subtests.
func eachRetentionDriver(t *testing.T, f func(t *testing.T, fx *retentionFixture)) {
	for _, driver := range testdb.Drivers() {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			f(t, newRetentionFixture(t, driver, "ret_"))
		})
	}
}

// addInbox records one message per instant for consumer, received at that
// instant, and returns the message ids in the same order.
func (fx *retentionFixture) addInbox(t testing.TB, consumer string, at ...time.Time) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, len(at))
	var stamps storesql.ArrayLiteral
	for i := range at {
		ids[i] = uuid.New()
		stamps.Time(at[i], false)
	}
	_, err := fx.db.Exec(`INSERT INTO `+fx.n.Inbox+` (consumer, message_id, received_at)
SELECT $1, id, at FROM unnest($2::uuid[], $3::timestamptz[]) AS r(id, at)`, consumer, storesql.UUIDArray(ids), stamps.String())
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// addDead writes one dead letter per instant, dead since that instant.
func (fx *retentionFixture) addDead(t testing.TB, at ...time.Time) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, len(at))
	var stamps storesql.ArrayLiteral
	for i := range at {
		ids[i] = uuid.New()
		stamps.Time(at[i], false)
	}
	_, err := fx.db.Exec(`INSERT INTO `+fx.n.Dead+` (id, message_type, transport, destination, body, headers,
    created_at, attempts, reason, dead_at)
SELECT id, 't', 'x', 'd', '\x'::bytea, '\x0100000000000000'::bytea, at, 5, 'retries exhausted', at
FROM unnest($1::uuid[], $2::timestamptz[]) AS r(id, at)`, storesql.UUIDArray(ids), stamps.String())
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// remaining returns the ids left in a table, keyed by id column.
func (fx *retentionFixture) remaining(t testing.TB, table, idColumn string) map[uuid.UUID]bool {
	t.Helper()
	rows, err := fx.db.Query(`SELECT ` + idColumn + ` FROM ` + table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	left := map[uuid.UUID]bool{}
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		left[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return left
}

func TestDeleteBeforeKeepsTheBoundaryAndGoesOldestFirst(t *testing.T) {
	t.Parallel()
	cutoff := time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)
	type table struct {
		name   string
		add    func(fx *retentionFixture, t *testing.T, at ...time.Time) []uuid.UUID
		delete func(fx *retentionFixture, before time.Time, limit int) (int64, error)
		table  func(fx *retentionFixture) (string, string)
	}
	for _, tb := range []table{
		{
			name: "inbox",
			add: func(fx *retentionFixture, t *testing.T, at ...time.Time) []uuid.UUID {
				return fx.addInbox(t, "billing", at...)
			},
			delete: func(fx *retentionFixture, before time.Time, limit int) (int64, error) {
				return fx.s.DeleteInboxBefore(context.Background(), before, limit)
			},
			table: func(fx *retentionFixture) (string, string) { return fx.n.Inbox, "message_id" },
		},
		{
			name: "dead",
			add: func(fx *retentionFixture, t *testing.T, at ...time.Time) []uuid.UUID {
				return fx.addDead(t, at...)
			},
			delete: func(fx *retentionFixture, before time.Time, limit int) (int64, error) {
				return fx.s.DeleteDeadBefore(context.Background(), before, limit)
			},
			table: func(fx *retentionFixture) (string, string) { return fx.n.Dead, "id" },
		},
	} {
		t.Run(tb.name, func(t *testing.T) {
			t.Parallel()
			eachRetentionDriver(t, func(t *testing.T, fx *retentionFixture) {
				// Five old rows, oldest last, then the boundary: a microsecond before
				// the cutoff goes, the cutoff itself and later stay.
				old := tb.add(fx, t,
					cutoff.Add(-time.Hour), cutoff.Add(-2*time.Hour), cutoff.Add(-3*time.Hour),
					cutoff.Add(-4*time.Hour), cutoff.Add(-5*time.Hour), cutoff.Add(-time.Microsecond))
				kept := tb.add(fx, t, cutoff, cutoff.Add(time.Microsecond), cutoff.Add(time.Hour))
				table, idColumn := tb.table(fx)

				// The cutoff is truncated to microseconds, as stored: 999ns past the
				// cutoff still keeps the row at the cutoff.
				n, err := tb.delete(fx, cutoff.Add(999*time.Nanosecond), 2)
				if err != nil || n != 2 {
					t.Fatalf("first batch = %d, %v; want 2", n, err)
				}
				left := fx.remaining(t, table, idColumn)
				if left[old[4]] || left[old[3]] || !left[old[2]] {
					t.Errorf("first batch did not take the two oldest rows: %v", left)
				}
				for {
					n, err := tb.delete(fx, cutoff, 3)
					if err != nil {
						t.Fatal(err)
					}
					if n < 3 {
						break
					}
				}
				left = fx.remaining(t, table, idColumn)
				if len(left) != len(kept) {
					t.Errorf("%d rows left, want the %d at or after the cutoff", len(left), len(kept))
				}
				for _, id := range kept {
					if !left[id] {
						t.Errorf("row %s at or after the cutoff was deleted", id)
					}
				}
			})
		})
	}
}

func TestDeleteBeforeSkipsLockedRows(t *testing.T) {
	t.Parallel()
	eachRetentionDriver(t, func(t *testing.T, fx *retentionFixture) {
		ctx := context.Background()
		cutoff := time.Now()
		ids := fx.addInbox(t, "billing", cutoff.Add(-3*time.Hour), cutoff.Add(-2*time.Hour), cutoff.Add(-time.Hour))
		tx, err := fx.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `SELECT 1 FROM `+fx.n.Inbox+` WHERE message_id = $1 FOR UPDATE`, ids[0]); err != nil {
			t.Fatal(err)
		}
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		n, err := fx.s.DeleteInboxBefore(dctx, cutoff, 10)
		if err != nil || n != 2 {
			t.Fatalf("delete while the oldest row is locked = %d, %v; want the 2 others, without waiting", n, err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if n, err := fx.s.DeleteInboxBefore(ctx, cutoff, 10); err != nil || n != 1 {
			t.Errorf("delete after the lock ended = %d, %v; want 1", n, err)
		}
	})
}

func TestDeleteBeforeRejectsInvalidArguments(t *testing.T) {
	t.Parallel()
	s, err := New(&recorder{}, store.Tables{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, f := range []func(context.Context, time.Time, int) (int64, error){s.DeleteInboxBefore, s.DeleteDeadBefore} {
		if _, err := f(ctx, time.Time{}, 10); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("zero cutoff = %v, want store.ErrInvalidArgument", err)
		}
		for _, limit := range []int{0, -1} {
			if _, err := f(ctx, time.Now(), limit); !errors.Is(err, store.ErrInvalidArgument) || !strings.Contains(err.Error(), "limit") {
				t.Errorf("limit %d = %v, want store.ErrInvalidArgument naming the limit", limit, err)
			}
		}
		if _, err := f(ctx, time.Now(), 10); !errors.Is(err, errRecorded) {
			t.Errorf("valid call = %v, want its statement run", err)
		}
	}
}

// TestRetentionPlansUseTheTimestampIndexes is TestWorkerSessionsAvoidFrozenPlans
// for the retention statements: from empty, analyzed tables, through enough
// executions to tempt a generic plan, to filled tables, a worker session's
// deletes reach rows through the timestamp index and by ctid, never by a
// sequential scan. The analyzed case where every row is past retention (a
// backlog when cleanup is first enabled) is checked too.
func TestRetentionPlansUseTheTimestampIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fx := newRetentionFixture(t, "pgx", "plan_")
	for _, table := range []string{fx.n.Inbox, fx.n.Dead} {
		if _, err := fx.db.ExecContext(ctx, `ANALYZE `+table); err != nil {
			t.Fatal(err)
		}
	}
	tuned := pinnedConn(t, fx.db)
	if err := TuneWorkerConn(ctx, tuned); err != nil {
		t.Fatal(err)
	}
	const cutoff = `'2030-01-01T00:00:00Z'`
	statements := []struct{ name, sql, index, table string }{
		{"deleteInbox", fx.s.rq.deleteInbox, "plan_inbox_received_idx", "plan_inbox"},
		{"deleteDead", fx.s.rq.deleteDead, "plan_dead_dead_at_idx", "plan_dead"},
	}
	for _, st := range statements {
		exec(t, tuned, `PREPARE `+st.name+` AS `+st.sql)
		for range 8 {
			exec(t, tuned, `EXECUTE `+st.name+`(`+cutoff+`, 1000)`)
		}
	}

	// A third of the rows past the cutoff. The plan compares the rows the
	// planner expects past the cutoff with the batch: when they fit in about one
	// or two batches, sorting the result of a sequential scan is cheaper and
	// PostgreSQL rightly prefers it (it reads a small table once or twice). What
	// must never happen is a scan per batch of a backlog many batches deep, so
	// that is what is checked: with the empty table's statistics (which make the
	// planner guess a third of the rows) at 100 rows a batch, and with current
	// statistics at 1,000.
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := make([]time.Time, 20000)
	for i := range at {
		at[i] = base.Add(time.Duration(i-len(at)/3) * time.Minute)
	}
	fx.addInbox(t, "billing", at...)
	fx.addDead(t, at...)

	check := func(phase, args string) {
		for _, st := range statements {
			plan := explain(t, tuned, st.name, args)
			switch {
			case !strings.Contains(plan, "2030-01-01 00:00:00"):
				t.Errorf("%s (%s) uses a generic plan on a worker session:\n%s", st.name, phase, plan)
			case strings.Contains(plan, "Seq Scan on "+st.table):
				t.Errorf("%s (%s) scans the table:\n%s", st.name, phase, plan)
			case !strings.Contains(plan, "Index Scan using "+st.index) || !strings.Contains(plan, "Tid Scan on "+st.table):
				t.Errorf("%s (%s) does not use the timestamp index and a TID scan:\n%s", st.name, phase, plan)
			}
		}
	}
	check("statistics of the empty table", cutoff+", 100")
	for _, table := range []string{fx.n.Inbox, fx.n.Dead} {
		if _, err := fx.db.ExecContext(ctx, `ANALYZE `+table); err != nil {
			t.Fatal(err)
		}
	}
	check("current statistics", cutoff+", 1000")
	// Every row past retention, as when cleanup is first enabled.
	const late = `'2031-01-01T00:00:00Z'`
	for _, st := range statements {
		plan := explain(t, tuned, st.name, late+", 1000")
		if strings.Contains(plan, "Seq Scan on "+st.table) || !strings.Contains(plan, "Index Scan using "+st.index) {
			t.Errorf("%s with every row past retention does not use the index:\n%s", st.name, plan)
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("plan of deleteInbox:\n%s", explain(t, tuned, "deleteInbox", cutoff+", 1000"))
}
