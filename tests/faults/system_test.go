package faults

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jmoiron/sqlx"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	gormlogger "gorm.io/gorm/logger"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
	relayerbun "github.com/relayer-go/relayer/enlist/bun"
	relayergorm "github.com/relayer-go/relayer/enlist/gorm"
	relayersqlx "github.com/relayer-go/relayer/enlist/sqlx"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/internal/tool/pgcluster"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

var (
	soak   = flag.Duration("soak", 0, "how long producers run in each scenario (default: the short CI profile, 4s)")
	report = flag.String("report", "", "write the scenarios' report table (Markdown) to this file")
)

func TestMain(m *testing.M) {
	flag.Parse()
	testdb.Main(m) // exits
}

// leaseDuration is the workers' lane and recovery lease: short, so that a
// lost worker's lanes move on quickly.
const leaseDuration = 2 * time.Second

// produceFor is how long producers run in a scenario.
func produceFor() time.Duration {
	if *soak > 0 {
		return *soak
	}
	return 4 * time.Second
}

// The messages: Event is unordered, Step is ordered by its key.
type (
	Event struct{ P, N int }
	Step  struct{ P, N int }
	// Poison is ordered like Step, with a retry policy that parks it after
	// two failed attempts.
	Poison struct{ N int }
)

func (Poison) MessageType() string { return "faults.poison" }

func (Event) MessageType() string { return "faults.event" }
func (Step) MessageType() string  { return "faults.step" }

// system is one outbox under test, in its own schema.
type system struct {
	t       *testing.T
	schema  string
	url     string
	outbox  relayer.Outbox
	db      *sql.DB // the producers'
	st      *workerstore.Store
	broker  *broker
	ledger  *ledger
	writer  *enlist.Writer
	relay   *relay
	orders  string
	sqlxDB  *sqlx.DB
	sqlxW   *relayersqlx.Writer
	bunDB   *bun.DB
	gormDB  *gorm.DB
	workers sync.Map // name → *worker
	next    atomic.Int64
	cluster *pgcluster.Cluster // when the scenario has a cluster of its own
	// proxied puts a proxy of its own between each worker and the server.
	proxied bool
	// procs are the worker processes, and brokerAddr the broker's address
	// for them, when the scenario runs workers in processes of their own.
	procs      []*process
	brokerAddr string
}

// worker is one Runner with a database pool of its own, whose sessions carry
// an application name that names it, so that a scenario can kill them.
type worker struct {
	name   string
	db     *sql.DB
	runner *dispatch.Runner
	proxy  *proxy // when the system is proxied
	// cancel cancels the context the runner was started with: the way
	// Runner.Run's callers stop it.
	cancel context.CancelFunc
}

// relay is the writer's commit listener: it hands committed rows to a
// running worker's Runner, so that workers can come and go under one
// writer. With none running, recovery finds the rows.
type relay struct {
	opts    store.Tables
	mu      sync.Mutex
	runners []*dispatch.Runner
}

func (r *relay) Tables() store.Tables { return r.opts }

func (r *relay) Committed(rows []relayer.Message) error {
	r.mu.Lock()
	var target *dispatch.Runner
	if n := len(r.runners); n > 0 {
		target = r.runners[rand.IntN(n)]
	}
	r.mu.Unlock()
	if target == nil {
		return nil
	}
	return target.Committed(rows)
}

func (r *relay) set(add, remove *dispatch.Runner) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if remove != nil {
		for i, x := range r.runners {
			if x == remove {
				r.runners = append(r.runners[:i], r.runners[i+1:]...)
				break
			}
		}
	}
	if add != nil {
		r.runners = append(r.runners, add)
	}
}

// newSystem sets up an outbox with unordered and ordered routes to an
// instrumented broker, retries and leases short enough for a test, and the
// producers' data layers.
func newSystem(t *testing.T) *system {
	return newSystemOn(t, testdb.URL(t), testdb.NewSchema(t))
}

// newSystemOn is newSystem on the database at dbURL, in schema, which
// exists.
func newSystemOn(t *testing.T, dbURL, schema string) *system {
	s := &system{t: t, schema: schema, url: dbURL, broker: newBroker(), ledger: newLedger()}
	s.outbox = scenarioOutbox(t, schema, s.broker)
	s.db = s.open(t, "producers")
	s.db.SetMaxOpenConns(24)
	ctx := context.Background()
	_, err := store.Migrate(ctx, s.db, store.TablesOf(s.outbox))
	must(t, err)
	s.orders = s.schema + ".orders"
	_, err = s.db.Exec(`CREATE TABLE ` + s.orders + ` (id bigserial PRIMARY KEY, note text NOT NULL)`)
	must(t, err)
	s.st, err = workerstore.New(s.db, store.TablesOf(s.outbox))
	must(t, err)
	s.relay = &relay{opts: store.TablesOf(s.outbox)}
	s.writer, err = enlist.NewWriter(s.outbox, enlist.Options{Listener: s.relay})
	must(t, err)
	s.sqlxDB = sqlx.NewDb(s.db, "pgx")
	s.sqlxW = relayersqlx.NewWriter(s.writer)
	s.bunDB = bun.NewDB(s.db, pgdialect.New()).WithQueryHook(relayerbun.NewHook(s.writer))
	s.gormDB, err = gorm.Open(postgres.New(postgres.Config{Conn: s.db}), &gorm.Config{Logger: gormlogger.Discard})
	must(t, err)
	must(t, s.gormDB.Use(relayergorm.Plugin(s.writer)))
	return s
}

// scenarioOutbox is the outbox of every scenario, in schema, sending
// through broker: unordered and ordered routes, and retries and leases short
// enough for a test.
func scenarioOutbox(t *testing.T, schema string, broker relayer.Transport) relayer.Outbox {
	routes := &relayer.Routes{}
	must(t, relayer.AddType[Event](routes, relayer.Route{Transport: "broker", Destination: "events"}))
	must(t, relayer.AddType[Step](routes, relayer.Route{Transport: "broker", Destination: "steps", Ordered: true}))
	must(t, relayer.AddType[Poison](routes, relayer.Route{Transport: "broker", Destination: "steps", Ordered: true,
		Retry: relayer.Retry{MaxAttempts: 2, Backoff: 50 * time.Millisecond}}))
	return relayer.Outbox{Schema: schema, Routes: routes, Transports: map[string]relayer.Transport{"broker": broker},
		Retry: relayer.Retry{MaxAttempts: 20, Backoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}}
}

// workerOptions are every worker's options, in this process or another.
// Takes and batches are smaller than the defaults (recovery 200 rows, an
// ordered batch 20 per lane) so that the duplicates' bounds they give
// (dispatch.InFlight: 320 rows per session, 1,140 per worker) are close
// to what a fault can cost in a run this short.
func workerOptions(name string) dispatch.RunnerOptions {
	return dispatch.RunnerOptions{
		Logger: quietLogger,
		Ordered: dispatch.OrderedOptions{Name: name, LeaseDuration: leaseDuration, PollInterval: 100 * time.Millisecond,
			BatchSize: 20},
		Recovery: dispatch.RecoveryOptions{LeaseDuration: leaseDuration, PollInterval: 100 * time.Millisecond, MinAge: 300 * time.Millisecond,
			BatchSize: 200},
		Cleanup: dispatch.CleanupOptions{Interval: time.Second},
	}
}

// open opens a pool whose sessions carry the application name
// <schema>/<role>, through px when it is not nil.
func (s *system) open(t *testing.T, role string, px ...*proxy) *sql.DB {
	u, err := url.Parse(s.url)
	must(t, err)
	if len(px) > 0 {
		u.Host = px[0].addr()
	}
	q := u.Query()
	q.Set("application_name", s.schema+"/"+role)
	u.RawQuery = q.Encode()
	db, err := sql.Open("pgx", u.String())
	must(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// startWorker starts a Runner with every worker kind on a pool of its own.
func (s *system) startWorker(ctx context.Context) *worker {
	name := "w" + strconv.FormatInt(s.next.Add(1), 10)
	var px *proxy
	var db *sql.DB
	if s.proxied {
		u, err := url.Parse(s.url)
		must(s.t, err)
		px = newProxy(s.t, u.Host)
		db = s.open(s.t, "worker-"+name, px)
	} else {
		db = s.open(s.t, "worker-"+name)
	}
	w := &worker{name: name, db: db, proxy: px}
	outbox := s.outbox
	outbox.Transports = map[string]relayer.Transport{"broker": workerSends{b: s.broker, w: w}}
	opts := workerOptions(name)
	// Start joins the membership on the database, so it fails while its
	// session is being killed; a supervisor tries again, as this does, on
	// the same Runner (a failed Start leaves it ready to start again).
	r, err := dispatch.NewRunner(db, outbox, opts)
	if err != nil {
		s.t.Errorf("new runner %s: %v", name, err)
		return nil
	}
	ctx, w.cancel = context.WithCancel(ctx)
	for attempt := 1; ; attempt++ {
		if err = r.Start(ctx); err == nil {
			break
		}
		if attempt == 20 {
			s.t.Errorf("start %s: %v", name, err)
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	w.runner = r
	s.workers.Store(name, w)
	s.relay.set(r, nil)
	return w
}

// stopWorker stops a worker and closes its pool.
func (s *system) stopWorker(w *worker) {
	s.relay.set(nil, w.runner)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.runner.Stop(ctx); err != nil {
		s.t.Errorf("stop %s: %v", w.name, err)
	}
	w.db.Close()
	if w.proxy != nil {
		w.proxy.close()
	}
	s.workers.Delete(w.name)
}

// cancelWorker stops a worker the way Runner.Run's callers do, by
// cancelling the context it was started with, then waits for it to end.
func (s *system) cancelWorker(w *worker) {
	s.relay.set(nil, w.runner)
	w.cancel()
	s.stopWorker(w)
}

// live returns the running workers.
func (s *system) live() []*worker {
	var ws []*worker
	s.workers.Range(func(_, v any) bool { ws = append(ws, v.(*worker)); return true })
	return ws
}

func (s *system) stopAll() {
	s.workers.Range(func(_, v any) bool {
		s.stopWorker(v.(*worker))
		return true
	})
}

// killSessions terminates the sessions of pools whose role starts with
// role, and returns how many.
func (s *system) killSessions(ctx context.Context, role string) (n int, err error) {
	err = s.harness(ctx, func(ctx context.Context) error {
		return s.db.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE application_name LIKE $1 AND pid <> pg_backend_pid()`, s.schema+"/"+role+"%").Scan(&n)
	})
	return n, err
}

// The ways a producer's transaction can end.
type action int

const (
	commitTx          action = iota
	rollbackTx               // the application rolls back after publishing
	rollbackSavepoint        // messages published in a savepoint rolled back, the rest committed
	cancelAtCommit           // the context is cancelled as the commit goes out
)

var errRollback = errors.New("the application rolls back")

// entryPoints are the ways producers publish, each through a data layer.
var entryPoints = []string{"database/sql RunInTx", "database/sql Begin", "database/sql Wrap", "sqlx", "bun", "gorm"}

// produce runs producers publishing through every entry point until stop
// closes. Each transaction inserts a business row, an unordered message and
// an ordered one on a key of the producer's own; mix says how it ends.
func (s *system) produce(producers int, mix func() action, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				s.transaction(p, i, mix())
			}
		})
	}
	return &wg
}

// transaction publishes one transaction's messages through entry point
// i mod len(entryPoints), ending it as act says, and records the outcome.
func (s *system) transaction(p, i int, act action) {
	ep := i % len(entryPoints)
	if act == cancelAtCommit {
		ep = 1 // the one where the application calls Commit itself
	}
	key := fmt.Sprintf("p%d-k%d", p, i%4)
	ids := []uuid.UUID{uuid.Must(relayer.NewID()), uuid.Must(relayer.NewID())}
	msgs := []relayer.Outgoing{relayer.NewOutgoing(Event{p, i}, relayer.WithID(ids[0])),
		relayer.NewOutgoing(Step{p, i}, relayer.Key(key), relayer.WithID(ids[1]))}
	var extraIDs []uuid.UUID
	var extra []relayer.Outgoing
	if act == rollbackSavepoint {
		extraIDs = []uuid.UUID{uuid.Must(relayer.NewID())}
		extra = []relayer.Outgoing{relayer.NewOutgoing(Event{p, -i}, relayer.WithID(extraIDs[0]))}
		s.ledger.publish(extraIDs, []string{""})
	}
	s.ledger.publish(ids, []string{"", key})

	ctx := context.Background()
	err := s.run(ctx, ep, act, msgs, extra)
	switch {
	case err == nil:
		s.ledger.settle(committed, ids...)
		s.ledger.settle(rolledBack, extraIDs...)
	case errors.Is(err, errCommitUnknown) || !errors.Is(err, errRollback) && !serverError(err):
		s.ledger.settle(uncertain, ids...)
		s.ledger.settle(rolledBack, extraIDs...)
	default:
		s.ledger.settle(rolledBack, ids...)
		s.ledger.settle(rolledBack, extraIDs...)
	}
}

// serverError reports whether err is an error the server reported, after
// which its transaction is certain to roll back. Any other failure (a
// session cut, a restart) may have come after the commit took effect.
func serverError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}

// errCommitUnknown wraps a commit that failed without saying whether it
// took effect.
var errCommitUnknown = errors.New("commit outcome unknown")

// body is what a transaction does on a connection: the business row, the
// savepoint with its messages rolled back, then the messages.
func body(ctx context.Context, exec func(context.Context, string) error, publish func(context.Context, ...relayer.Outgoing) error,
	orders string, act action, msgs, extra []relayer.Outgoing) error {
	if err := exec(ctx, `INSERT INTO `+orders+` (note) VALUES ('order')`); err != nil {
		return err
	}
	if act == rollbackSavepoint {
		if err := exec(ctx, `SAVEPOINT faults`); err != nil {
			return err
		}
		if err := publish(ctx, extra...); err != nil {
			return err
		}
		if err := exec(ctx, `ROLLBACK TO SAVEPOINT faults`); err != nil {
			return err
		}
	}
	if err := publish(ctx, msgs...); err != nil {
		return err
	}
	if act == rollbackTx {
		return errRollback
	}
	return nil
}

// run runs one transaction through entry point ep.
func (s *system) run(ctx context.Context, ep int, act action, msgs, extra []relayer.Outgoing) error {
	sqlExec := func(e interface {
		ExecContext(context.Context, string, ...any) (sql.Result, error)
	}) func(context.Context, string) error {
		return func(ctx context.Context, q string) error { _, err := e.ExecContext(ctx, q); return err }
	}
	switch entryPoints[ep] {
	case "database/sql RunInTx":
		return s.writer.RunInTx(ctx, s.db, nil, func(tx *enlist.Tx) error {
			return body(ctx, sqlExec(tx), tx.PublishAll, s.orders, act, msgs, extra)
		})
	case "database/sql Begin":
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		tx, err := s.writer.Begin(cctx, s.db, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := body(cctx, sqlExec(tx), tx.PublishAll, s.orders, act, msgs, extra); err != nil {
			return err
		}
		if act == cancelAtCommit {
			time.AfterFunc(time.Duration(rand.IntN(300))*time.Microsecond, cancel)
			if err := tx.Commit(); err != nil {
				return fmt.Errorf("%w: %w", errCommitUnknown, err)
			}
			return nil
		}
		return tx.Commit()
	case "database/sql Wrap":
		sqlTx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		tx := s.writer.Wrap(sqlTx)
		defer tx.Rollback()
		if err := body(ctx, sqlExec(tx), tx.PublishAll, s.orders, act, msgs, extra); err != nil {
			return err
		}
		return tx.Commit()
	case "sqlx":
		return s.sqlxW.RunInTx(ctx, s.sqlxDB, nil, func(tx *relayersqlx.Tx) error {
			return body(ctx, sqlExec(tx), tx.PublishAll, s.orders, act, msgs, extra)
		})
	case "bun":
		return s.bunDB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			return body(ctx, sqlExec(tx), func(ctx context.Context, ms ...relayer.Outgoing) error {
				return relayerbun.PublishAll(ctx, tx, ms...)
			}, s.orders, act, msgs, extra)
		})
	case "gorm":
		return s.gormDB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			return body(ctx, func(_ context.Context, q string) error { return tx.Exec(q).Error },
				func(_ context.Context, ms ...relayer.Outgoing) error { return relayergorm.PublishAll(tx, ms...) },
				s.orders, act, msgs, extra)
		})
	}
	panic("unknown entry point")
}

// standardMix is most transactions committing, with some rolled back, some
// savepoints rolled back and some contexts cancelled at commit.
func standardMix() action {
	switch x := rand.IntN(100); {
	case x < 8:
		return rollbackTx
	case x < 15:
		return rollbackSavepoint
	case x < 20:
		return cancelAtCommit
	}
	return commitTx
}

// settleAndCheck waits until every committed message arrived (or limit
// passed), then checks the promise and returns the verdict and how long
// delivery took to finish after the producers stopped.
func (s *system) settleAndCheck(limit time.Duration) (verdict, time.Duration) {
	start := time.Now()
	testkit.Within(limit, func() bool {
		ds, _ := s.broker.snapshot()
		return s.ledger.missing(ds) == 0
	})
	drained := time.Since(start)
	ds, overlaps := s.broker.snapshot()
	return s.ledger.check(ds, overlaps), drained
}

// outboxLeft counts the rows left in the outbox and the dead letters.
func (s *system) outboxLeft(ctx context.Context) (rows, dead int64) {
	must(s.t, s.harness(ctx, func(ctx context.Context) error {
		return s.db.QueryRowContext(ctx, `SELECT count(*) FROM `+s.schema+`.outbox`).Scan(&rows)
	}))
	must(s.t, s.harness(ctx, func(ctx context.Context) (err error) {
		dead, err = s.st.CountDead(ctx)
		return err
	}))
	return rows, dead
}

// harness runs a statement of the suite's own (a check, a count, a fault's
// injection), trying again for up to 30 s while it fails for the faults the
// suite injects itself: a session killed or cut, a server restarting. Only
// what the system under test does may fail a scenario, never the checker's
// own connection.
func (s *system) harness(ctx context.Context, f func(ctx context.Context) error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f(ctx)
		if err == nil || !connectionLost(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// connectionLost reports whether err is the loss of a connection or a
// server shutting down or starting (SQLSTATE classes 08 and 57P), rather
// than an error of the statement itself.
func connectionLost(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P")
	}
	return !errors.Is(err, sql.ErrNoRows) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// baseline is the process's goroutines, live heap and resident memory
// before a scenario.
type baseline struct {
	goroutines int
	heap       uint64
	rss        int64
}

func measure() baseline {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return baseline{goroutines: runtime.NumGoroutine(), heap: m.HeapAlloc, rss: rssBytes()}
}

// rssBytes reads the process's resident set size on Linux, 0 elsewhere.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
