package workerstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/tables"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

// TestWorkerSessionsAvoidFrozenPlans starts from an empty, analyzed outbox,
// runs every hot statement often enough for PostgreSQL to consider a generic
// plan, fills the table, and checks the plan each statement now gets. On a
// default session the generic plan made while the table was empty usually stays
// cached and scans the table; on a tuned worker session every statement is
// planned for its actual values and the table's actual size, and reaches rows
// through an index.
func TestWorkerSessionsAvoidFrozenPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, s := emptyAnalyzedOutbox(t)
	stable := stableStatements(t, s)
	tuned := pinnedConn(t, db)
	if err := TuneWorkerConn(ctx, tuned); err != nil {
		t.Fatal(err)
	}
	plain := pinnedConn(t, db)

	const (
		id   = `'0190a000-0000-7000-8000-000000000000'`
		ids  = `'{0190a000-0000-7000-8000-000000000000,0190a000-0000-7000-8000-000000000001}'`
		now  = `'2030-01-01T00:00:00Z'`
		text = `'{a,b}'`
	)
	statements := []struct{ name, sql, args string }{
		{"readLane", stable["readLane"], "3, " + id + ", " + now + ", 100"},
		{"readUnordered", stable["readUnordered"], id + ", " + now + ", 100"},
		{"claim", stable["claim"], id + ", " + id + ", " + now + ", " + now},
		{"claimBatch", stable["claimBatch"], ids + ", " + id + ", " + now + ", " + now},
		{"renew", stable["renew"], id + ", " + id + ", " + now + ", " + now},
		{"complete", stable["complete"], id + ", " + id + ", " + now},
		{"completeBatch", stable["completeBatch"], ids + ", " + id + ", " + now},
		{"fail", stable["fail"], id + ", " + id + ", 'e', " + now},
		{"failBatch", stable["failBatch"], ids + ", " + text + ", " + id + ", " + now + ", '{NULL,NULL}'"},
		{"park", stable["park"], ids + ", " + text + ", " + id + ", " + now},
		{"releaseBatch", stable["releaseBatch"], ids + ", " + id + ", " + now},
	}
	for _, conn := range []*sql.Conn{tuned, plain} {
		for _, st := range statements {
			exec(t, conn, `PREPARE `+st.name+` AS `+st.sql)
			for range 8 {
				exec(t, conn, `EXECUTE `+st.name+`(`+st.args+`)`)
			}
		}
	}

	// Fill the table without analyzing it (fewer rows than the autovacuum
	// threshold the migration sets, so autoanalyze cannot intervene).
	msgs := make([]relayer.Message, 4000)
	for i := range msgs {
		msgs[i] = relayer.Message{ID: uuid.Must(relayer.NewID()), Type: "t", Transport: "x", Destination: "d", Body: make([]byte, 200)}
		if i%2 == 0 {
			msgs[i].Key, msgs[i].Ordered, msgs[i].Lane = "k", true, i%8
		}
	}
	if err := s.Insert(ctx, msgs); err != nil {
		t.Fatal(err)
	}

	// A custom plan shows the parameter values (every statement takes now); a
	// generic one shows $n.
	const nowValue = "2030-01-01 00:00:00"
	seqScan := "Seq Scan on plan_outbox"
	frozen := 0
	for _, st := range statements {
		plan := explain(t, tuned, st.name, st.args)
		if !strings.Contains(plan, nowValue) {
			t.Errorf("%s on a worker session uses a generic plan:\n%s", st.name, plan)
		}
		if strings.Contains(plan, seqScan) {
			t.Errorf("%s on a worker session scans the outbox:\n%s", st.name, plan)
		}
		if strings.Contains(explain(t, plain, st.name, st.args), seqScan) {
			frozen++
		}
	}
	// Whether the default session still holds its frozen plans depends on cache
	// invalidations caused by other sessions, so it is reported, not asserted.
	t.Logf("%d of %d statements kept a table-scanning generic plan on a default session", frozen, len(statements))
	if err := UntuneWorkerConn(ctx, tuned); err != nil {
		t.Fatal(err)
	}
	var mode, commit string
	if err := tuned.QueryRowContext(ctx, `SELECT current_setting('plan_cache_mode'), current_setting('synchronous_commit')`).Scan(&mode, &commit); err != nil {
		t.Fatal(err)
	}
	if mode != "auto" || commit != "on" {
		t.Errorf("after UntuneWorkerConn: plan_cache_mode %s, synchronous_commit %s; want the defaults", mode, commit)
	}
}

// emptyAnalyzedOutbox makes an outbox (table prefix plan_) and analyzes it
// while it is empty, the state in which PostgreSQL makes the plans that go
// wrong once the table fills.
func emptyAnalyzedOutbox(t *testing.T) (*sql.DB, *Store) {
	t.Helper()
	ctx := context.Background()
	db := testdb.Open(t, "pgx")
	opts := store.Tables{Schema: testdb.NewSchema(t), TablePrefix: "plan_"}
	if _, err := store.Migrate(ctx, db, opts); err != nil {
		t.Fatal(err)
	}
	s, err := New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE `+namesOf(s).Outbox); err != nil {
		t.Fatal(err)
	}
	return db, s
}

func pinnedConn(t *testing.T, db *sql.DB) *sql.Conn {
	t.Helper()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.ExecContext(context.Background(), `DEALLOCATE ALL`)
		conn.Close()
	})
	return conn
}

func exec(t *testing.T, conn *sql.Conn, query string) {
	t.Helper()
	if _, err := conn.ExecContext(context.Background(), query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func explain(t *testing.T, conn *sql.Conn, name, args string) string {
	t.Helper()
	rows, err := conn.QueryContext(context.Background(), `EXPLAIN EXECUTE `+name+`(`+args+`)`)
	if err != nil {
		t.Fatalf("explain %s: %v", name, err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	return strings.Join(plan, "\n")
}

// genericSession returns an empty, analyzed outbox and a pinned connection
// tuned as a taking session with generic plans.
func genericSession(t *testing.T) (*Store, *sql.Conn) {
	t.Helper()
	ctx := context.Background()
	db, s := emptyAnalyzedOutbox(t)
	conn := pinnedConn(t, db)
	if err := TuneWorkerConn(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if err := TuneTakingConn(ctx, conn, time.Minute, true); err != nil {
		t.Fatal(err)
	}
	return s, conn
}

// prepareUsed prepares query as name on conn and executes it with args
// more often than PostgreSQL waits before it may choose a generic plan.
func prepareUsed(t *testing.T, conn *sql.Conn, name, query, args string) {
	t.Helper()
	exec(t, conn, `PREPARE `+name+` AS `+query)
	for range 8 {
		exec(t, conn, `EXECUTE `+name+`(`+args+`)`)
	}
}

// TestTakingSessionsPlanWithIndexes checks the statements a taking session runs
// ([TuneTakingConn] with generic plans): their generic plans, made while the
// outbox was empty and analyzed, still reach rows through an index once the
// table is full, and the session keeps using them (no planning per take).
func TestTakingSessionsPlanWithIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, taking := genericSession(t)
	const (
		id  = `'0190a000-0000-7000-8000-000000000000'`
		ids = `'{0190a000-0000-7000-8000-000000000000,0190a000-0000-7000-8000-000000000001}'`
		now = `'2030-01-01T00:00:00Z'`
	)
	statements := []struct{ name, sql, args string }{
		{"takeIDs", s.q.takeIDs, ids + ", " + now},
		{"takeNext", s.q.takeNext, id + ", 1000, " + now + ", " + now + ", '{slow}', '{d}'"},
	}
	for _, st := range statements {
		prepareUsed(t, taking, st.name, st.sql, st.args)
	}
	msgs := make([]relayer.Message, 4000)
	for i := range msgs {
		msgs[i] = relayer.Message{ID: uuid.Must(relayer.NewID()), Type: "t", Transport: "x", Destination: "d", Body: make([]byte, 200)}
	}
	if err := s.Insert(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	for _, st := range statements {
		plan := explain(t, taking, st.name, st.args)
		if strings.Contains(plan, "2030-01-01 00:00:00") {
			t.Errorf("%s on a taking session was planned for its values, not generically:\n%s", st.name, plan)
		}
		if strings.Contains(plan, "Seq Scan on plan_outbox") {
			t.Errorf("%s on a taking session scans the outbox:\n%s", st.name, plan)
		}
	}
	if err := UntuneWorkerConn(ctx, taking); err != nil {
		t.Fatal(err)
	}
	var mode, seq, idle, jit, pageCost, defaultJIT, defaultPageCost string
	if err := taking.QueryRowContext(ctx, `SELECT current_setting('plan_cache_mode'), current_setting('enable_seqscan'),
		current_setting('idle_in_transaction_session_timeout'), current_setting('jit'), current_setting('random_page_cost'),
		(SELECT reset_val FROM pg_settings WHERE name = 'jit'), (SELECT reset_val FROM pg_settings WHERE name = 'random_page_cost')`).
		Scan(&mode, &seq, &idle, &jit, &pageCost, &defaultJIT, &defaultPageCost); err != nil {
		t.Fatal(err)
	}
	if mode != "auto" || seq != "on" || idle != "0" || jit != defaultJIT || pageCost != defaultPageCost {
		t.Errorf("after UntuneWorkerConn: plan_cache_mode %s, enable_seqscan %s, idle_in_transaction_session_timeout %s, jit %s, random_page_cost %s; want the defaults",
			mode, seq, idle, jit, pageCost)
	}
	if err := TuneTakingConn(ctx, taking, time.Microsecond, true); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("TuneTakingConn with a 1µs timeout = %v, want store.ErrInvalidArgument", err)
	}
}

// TestOrderedSessionsPlanWithIndexes checks the statements an ordered
// worker's batch session runs, which it tunes as a taking session (generic
// plans, sequential scans off): generic plans made while the outbox was
// empty and analyzed still read lanes through the lane index and address
// rows by id through the primary key once the table is full.
func TestOrderedSessionsPlanWithIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn := genericSession(t)
	const (
		token = `'0190a000-0000-7000-8000-00000000000f'`
		ids   = `'{0190a000-0000-7000-8000-000000000000,0190a000-0000-7000-8000-000000000001}'`
		texts = `'{a,b}'`
	)
	pkey := s.Tables().TablePrefix + "outbox_pkey"
	laneIdx := s.Tables().TablePrefix + "outbox_lane_pending_idx"
	xactIdx := s.Tables().TablePrefix + "outbox_lane_xact_idx"
	// value is what a plan made for the arguments, not generically, shows.
	statements := []struct{ name, sql, args, index, value string }{
		{"laneProbe", s.q.laneProbe, probeArgs(laneRead4, token), laneIdx, "{0,1,2,3}"},
		{"laneProbeXact", s.q.laneProbe, probeArgs(laneRead4, token), xactIdx, "{0,1,2,3}"},
		{"laneHeads", s.q.laneHeads, laneRead4, laneIdx, "{0,1,2,3}"},
		{"laneHeadsXact", s.q.laneHeads, laneRead4, xactIdx, "{0,1,2,3}"},
		{"laneHeadsUnprobed", s.q.laneHeadsUnprobed, laneRead4, laneIdx, "{0,1,2,3}"},
		{"laneHeadsUnprobedXact", s.q.laneHeadsUnprobed, laneRead4, xactIdx, "{0,1,2,3}"},
		{"laneHeadsSorted", s.q.laneHeadsSorted, laneRead4, laneIdx, "{0,1,2,3}"},
		{"laneDelete", s.q.laneDelete, ids + ", " + token, pkey, "0190a000"},
		// Run on the empty outbox: deleting none of none is deleting all.
		{"laneDeleteAll", s.q.laneDeleteAll, ids + ", " + token + ", 0", pkey, "0190a000"},
		{"laneFail", s.q.laneFail, ids + ", " + texts + ", '{NULL,NULL}', " + token, pkey, "0190a000"},
		{"lanePark", s.q.lanePark, ids + ", " + texts + ", " + token, pkey, "0190a000"},
	}
	for _, st := range statements {
		prepareUsed(t, conn, st.name, st.sql, st.args)
	}
	msgs := make([]relayer.Message, 4000)
	for i := range msgs {
		key := fmt.Sprintf("k%d", i%500)
		lane, err := relayer.Lane(key, relayer.LanesDefault)
		if err != nil {
			t.Fatal(err)
		}
		msgs[i] = relayer.Message{ID: uuid.Must(relayer.NewID()), Type: "t", Transport: "x", Destination: "d", Body: make([]byte, 200),
			Key: key, Ordered: true, Lane: lane}
	}
	if err := s.Insert(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	for _, st := range statements {
		plan := explain(t, conn, st.name, st.args)
		if strings.Contains(plan, st.value) {
			t.Errorf("%s on an ordered session was planned for its values, not generically:\n%s", st.name, plan)
		}
		if regexp.MustCompile(`Index Scan using \S+ on plan_outbox \w+  \(cost=[^)]*\)\n(\s+->|\s*$)`).MatchString(plan + "\n") {
			t.Errorf("%s on an ordered session walks a whole index of the outbox:\n%s", st.name, plan)
		}
		if strings.Contains(plan, "Seq Scan on plan_outbox") {
			t.Errorf("%s on an ordered session scans the outbox:\n%s", st.name, plan)
		}
		if !strings.Contains(plan, st.index) {
			t.Errorf("%s on an ordered session does not use %s:\n%s", st.name, st.index, plan)
		}
		if st.index == pkey && strings.Contains(plan, laneIdx) {
			t.Errorf("%s on an ordered session walks the lane index:\n%s", st.name, plan)
		}
		if walksBelowCursor(plan, laneIdx) {
			t.Errorf("%s on an ordered session walks the lane index below the cursor:\n%s", st.name, plan)
		}
	}
}

// walksBelowCursor reports whether plan reads the lane index idx for the rows
// at or below a lane cursor (id <=), which is the region of dead entries
// that cursor reads exist to skip: those rows must come from the xact index.
func walksBelowCursor(plan, idx string) bool {
	lines := strings.Split(plan, "\n")
	for i, l := range lines {
		if !strings.Contains(l, "using "+idx) && !strings.Contains(l, "on "+idx) {
			continue
		}
		for _, next := range lines[i+1 : min(i+3, len(lines))] {
			if strings.Contains(next, "Index Cond") && strings.Contains(next, "id <=") {
				return true
			}
		}
	}
	return false
}

// TestHotStatementsProbeWhateverTheStatistics plans every statement a worker
// runs after the outbox's statistics were taken at a bad moment (while it was
// empty, or while it held only unordered rows) and the table then filled with
// the other kind of row, unanalyzed. Statements that address rows by id must
// stay primary-key probes and lane reads must follow the lane index: a plan
// that walks the pending ordered rows per claim made ordered dispatch crawl.
func TestHotStatementsProbeWhateverTheStatistics(t *testing.T) {
	t.Parallel()
	for _, stats := range []string{"empty", "unordered only"} {
		t.Run(stats, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, s := emptyAnalyzedOutbox(t)
			stable := stableStatements(t, s)
			outbox := namesOf(s).Outbox
			exec(t, pinnedConn(t, db), `ALTER TABLE `+outbox+` SET (autovacuum_enabled = false)`)
			if stats == "unordered only" {
				insertPlanRows(t, s, 20000, false)
				exec(t, pinnedConn(t, db), `ANALYZE `+outbox)
			}
			ordered := insertPlanRows(t, s, 40000, true)
			worker := pinnedConn(t, db)
			if err := TuneWorkerConn(ctx, worker); err != nil {
				t.Fatal(err)
			}
			var ids strings.Builder
			ids.WriteString(`'{`)
			for i, id := range ordered[:100] {
				if i > 0 {
					ids.WriteString(",")
				}
				ids.WriteString(id.String())
			}
			ids.WriteString(`}'`)
			const (
				id   = `'0190a000-0000-7000-8000-000000000000'`
				now  = `'2030-01-01T00:00:00Z'`
				text = `'{a,b}'`
			)
			pkey := s.Tables().TablePrefix + "outbox_pkey"
			laneIdx := s.Tables().TablePrefix + "outbox_lane_pending_idx"
			statements := []struct{ name, sql, args, index string }{
				{"completeBatch", stable["completeBatch"], ids.String() + ", " + id + ", " + now, pkey},
				{"laneDelete", s.q.laneDelete, ids.String() + ", " + id, pkey},
				{"laneFail", s.q.laneFail, ids.String() + ", " + text + ", '{NULL,NULL}', " + id, pkey},
				{"lanePark", s.q.lanePark, ids.String() + ", " + text + ", " + id, pkey},
				{"releaseBatch", stable["releaseBatch"], ids.String() + ", " + id + ", " + now, pkey},
				{"fail", stable["fail"], id + ", " + id + ", 'e', " + now, pkey},
				{"claimBatch", stable["claimBatch"], ids.String() + ", " + id + ", " + now + ", " + now, pkey},
				{"takeIDs", s.q.takeIDs, ids.String() + ", " + now, pkey},
				{"laneHeads", s.q.laneHeads, laneRead1, laneIdx},
				{"laneHeadsXact", s.q.laneHeads, laneRead1, s.Tables().TablePrefix + "outbox_lane_xact_idx"},
				{"laneHeadsUnprobed", s.q.laneHeadsUnprobed, laneRead1, laneIdx},
				{"laneHeadsUnprobedXact", s.q.laneHeadsUnprobed, laneRead1, s.Tables().TablePrefix + "outbox_lane_xact_idx"},
				{"readLane", stable["readLane"], "3, " + id + ", " + now + ", 100", laneIdx},
				{"laneProbe", s.q.laneProbe, probeArgs(laneRead1, id), laneIdx},
				{"laneProbeXact", s.q.laneProbe, probeArgs(laneRead1, id), s.Tables().TablePrefix + "outbox_lane_xact_idx"},
			}
			for _, st := range statements {
				exec(t, worker, `PREPARE `+st.name+` AS `+st.sql)
				plan := longArray.ReplaceAllString(explain(t, worker, st.name, st.args), "'{…}'")
				if strings.Contains(plan, "Seq Scan on "+s.Tables().TablePrefix+"outbox") {
					t.Errorf("%s scans the outbox:\n%s", st.name, plan)
				}
				if !strings.Contains(plan, st.index) {
					t.Errorf("%s does not use %s:\n%s", st.name, st.index, plan)
				}
				if st.index == pkey && strings.Contains(plan, laneIdx) {
					t.Errorf("%s walks the lane index instead of probing ids:\n%s", st.name, plan)
				}
				if walksBelowCursor(plan, laneIdx) {
					t.Errorf("%s walks the lane index below the cursor:\n%s", st.name, plan)
				}
			}
		})
	}
}

// Arguments of laneHeads, the lanes read from cursors: four lanes, and one.
const (
	laneRead4 = `'{0,1,2,3}', '{0190a000-0000-7000-8000-000000000000,0190a000-0000-7000-8000-000000000000,` +
		`0190a000-0000-7000-8000-000000000000,0190a000-0000-7000-8000-000000000000}', '{1000,1000,1000,1000}', ` +
		`'{"{900}","{900}","{}","{}"}', '{NULL,NULL,NULL,NULL}', '{NULL,NULL,NULL,NULL}', '{NULL,NULL,NULL,NULL}', ` +
		`'{900,900,1000,1000}', '{"{}","{}","{900}","{900}"}', '{0:0,0:0,0:0,0:0}', 100`
	laneRead1 = `'{3}', '{0190a000-0000-7000-8000-000000000000}', '{1000}', '{"{900}"}', '{NULL}', '{NULL}', '{NULL}', '{1000}', '{"{900}"}', '{0:0}', 100`
)

// probeArgs returns the arguments of laneProbe: those of laneHeads read,
// without the limit, and token.
func probeArgs(read, token string) string {
	return strings.TrimSuffix(read, ", 100") + ", " + token
}

// longArray matches the id arrays in a plan, shortened in failure reports.
var longArray = regexp.MustCompile(`'\{[^}]{200,}\}'`)

// insertPlanRows inserts n rows, ordered ones spread over 32 lanes, and
// returns their ids in insertion order.
func insertPlanRows(t *testing.T, s *Store, n int, ordered bool) []uuid.UUID {
	t.Helper()
	msgs := make([]relayer.Message, n)
	ids := make([]uuid.UUID, n)
	for i := range msgs {
		ids[i] = uuid.Must(relayer.NewID())
		msgs[i] = relayer.Message{ID: ids[i], Type: "t", Transport: "x", Destination: "d", Body: make([]byte, 20)}
		if ordered {
			msgs[i].Key, msgs[i].Ordered, msgs[i].Lane = "k"+strconv.Itoa(i%1000), true, i%32
		}
	}
	for start := 0; start < n; start += 5000 {
		if err := s.Insert(context.Background(), msgs[start:min(start+5000, n)]); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// TestOrderedReadsFollowTheLaneIndexOnABacklog plans the lane reads on an
// ordered session after the outbox was analyzed holding a backlog whose
// lanes interleave in id order, as producers write them. The primary key,
// whose order matches the table's, looked cheaper to the planner than the
// lane index, and each lane's read then walked every other lane's rows
// between its cursor and its hundredth row (27 index entries per delivered
// row in a 200,000-row drain). And however large the plan's estimate, a
// worker's statement is never compiled by JIT, which cost about a second a
// read once an ANALYZE had seen a large backlog written in one transaction.
func TestOrderedReadsFollowTheLaneIndexOnABacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, s := emptyAnalyzedOutbox(t)
	outbox := namesOf(s).Outbox
	exec(t, pinnedConn(t, db), `ALTER TABLE `+outbox+` SET (autovacuum_enabled = false)`)
	insertPlanRows(t, s, 40000, true)
	exec(t, pinnedConn(t, db), `ANALYZE `+outbox)
	conn := pinnedConn(t, db)
	if err := TuneWorkerConn(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if err := TuneTakingConn(ctx, conn, time.Minute, true); err != nil {
		t.Fatal(err)
	}
	var jitAvailable bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_jit_available()`).Scan(&jitAvailable); err != nil {
		t.Fatal(err)
	}
	// Whatever a plan's estimate, JIT would compile it.
	exec(t, conn, `SET jit_above_cost = 0`)
	token := `'0190a000-0000-7000-8000-00000000000f'`
	pkey := s.Tables().TablePrefix + "outbox_pkey"
	laneIdx := s.Tables().TablePrefix + "outbox_lane_pending_idx"
	for _, st := range []struct{ name, sql, args string }{
		{"laneHeads", s.q.laneHeads, laneRead4},
		{"laneProbe", s.q.laneProbe, probeArgs(laneRead4, token)},
	} {
		prepareUsed(t, conn, st.name, st.sql, st.args)
		plan := explain(t, conn, st.name, st.args)
		if strings.Contains(plan, "using "+pkey) {
			t.Errorf("%s on an ordered session walks the primary key on a backlog:\n%s", st.name, plan)
		}
		if !strings.Contains(plan, laneIdx) {
			t.Errorf("%s on an ordered session does not use %s:\n%s", st.name, laneIdx, plan)
		}
		if jitAvailable && strings.Contains(plan, "JIT:") {
			t.Errorf("%s on a worker session is compiled by JIT:\n%s", st.name, plan)
		}
	}
}

// namesOf returns the names of s's tables.
func namesOf(s *Store) tables.Names {
	return tables.Of(s.Tables().Schema, s.Tables().TablePrefix)
}

// recorder is a database handle that records the statement it is given
// and runs nothing.
type recorder struct{ query string }

var errRecorded = errors.New("recorded, not run")

func (r *recorder) ExecContext(_ context.Context, query string, _ ...any) (sql.Result, error) {
	r.query = query
	return nil, errRecorded
}

func (r *recorder) QueryContext(_ context.Context, query string, _ ...any) (*sql.Rows, error) {
	r.query = query
	return nil, errRecorded
}

// stableStatements returns the statements of package store's claim
// protocol that these plan tests check beside the workers' own, by name,
// as s's store runs them: each method is called on a handle that records
// its statement.
func stableStatements(t *testing.T, s *Store) map[string]string {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	id := uuid.New()
	ids := []uuid.UUID{id}
	c := store.NewClaim(now, time.Minute)
	failures := []store.Failure{{ID: id, Error: "e"}}
	calls := map[string]func(st *store.Store) error{
		"readLane": func(st *store.Store) error {
			_, err := st.ReadLane(ctx, nil, 3, store.ReadOptions{Limit: 1})
			return err
		},
		"readUnordered": func(st *store.Store) error {
			_, err := st.ReadUnordered(ctx, nil, store.ReadOptions{Limit: 1})
			return err
		},
		"claim": func(st *store.Store) error { _, err := st.Claim(ctx, id, c, now); return err },
		"claimBatch": func(st *store.Store) error {
			_, err := st.ClaimBatch(ctx, nil, ids, c, now)
			return err
		},
		"renew":         func(st *store.Store) error { _, err := st.Renew(ctx, id, c.Token, c.Until, now); return err },
		"complete":      func(st *store.Store) error { _, err := st.Complete(ctx, id, c.Token, now); return err },
		"completeBatch": func(st *store.Store) error { _, err := st.CompleteBatch(ctx, ids, c.Token, now); return err },
		"fail":          func(st *store.Store) error { _, err := st.Fail(ctx, id, c.Token, "e", now); return err },
		"failBatch":     func(st *store.Store) error { _, err := st.FailBatch(ctx, failures, c.Token, now); return err },
		"park":          func(st *store.Store) error { _, err := st.Park(ctx, failures, c.Token, now); return err },
		"releaseBatch":  func(st *store.Store) error { _, err := st.ReleaseBatch(ctx, ids, c.Token, now); return err },
	}
	out := make(map[string]string, len(calls))
	for name, call := range calls {
		rec := &recorder{}
		st, err := s.Store.With(rec)
		if err != nil {
			t.Fatal(err)
		}
		if err := call(st); !errors.Is(err, errRecorded) || rec.query == "" {
			t.Fatalf("%s ran no statement: %v", name, err)
		}
		out[name] = rec.query
	}
	return out
}
