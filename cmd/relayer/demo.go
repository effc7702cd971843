package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jmoiron/sqlx"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
	relayerbun "github.com/relayer-go/relayer/enlist/bun"
	relayergorm "github.com/relayer-go/relayer/enlist/gorm"
	relayersqlx "github.com/relayer-go/relayer/enlist/sqlx"
	"github.com/relayer-go/relayer/internal/pgcluster"
	"github.com/relayer-go/relayer/store"
	relayernats "github.com/relayer-go/relayer/transport/nats"
)

// Demo defaults and limits.
const (
	demoMessagesDefault = 2000
	demoMessagesMax     = 1_000_000
	demoDurationDefault = 2 * time.Minute
	demoWorkersDefault  = 2
	demoWorkersMax      = 16
	demoSchemaDefault   = "relayer_demo"

	// demoWriters is the number of concurrent order writers. Each owns its
	// customers, so that a customer's orders are written one after another
	// and their sequence numbers follow commit order.
	demoWriters          = 4
	demoCustomersPerFeed = 5
	// demoReminderEvery makes every n-th order's second message a reminder
	// scheduled demoScheduleDelay ahead instead of an immediate one.
	demoReminderEvery = 10
	demoScheduleDelay = 3 * time.Second
	stopTimeout       = 10 * time.Second
)

// The four entry points, in the order the summary lists them.
var demoPaths = [...]string{"database/sql", "sqlx", "bun", "gorm"}

// Message kinds, each on its own route.
const (
	kindPlaced   = iota // unordered, sent by direct dispatch
	kindActivity        // ordered by customer, sent by the ordered workers
	kindReminder        // unordered and scheduled, sent by recovery once due
	kindCount
)

var kindNames = [kindCount]string{"unordered", "ordered by customer", "scheduled +3s"}

// OrderPlaced is the unordered message of an order.
type OrderPlaced struct {
	Order      string `json:"order"`
	Customer   string `json:"customer"`
	TotalCents int64  `json:"total_cents"`
	Path       string `json:"path"`
}

// CustomerActivity is the ordered message of an order: Seq counts the
// customer's orders from 1, so the consumer can check their order.
type CustomerActivity struct {
	Customer string `json:"customer"`
	Seq      int    `json:"seq"`
	Order    string `json:"order"`
	Path     string `json:"path"`
}

// PaymentReminder is scheduled a few seconds after its order.
type PaymentReminder struct {
	Order    string    `json:"order"`
	Customer string    `json:"customer"`
	Due      time.Time `json:"due"`
	Path     string    `json:"path"`
}

// demoOrder is the business row, written through each data layer.
type demoOrder struct {
	ID         string `db:"id" bun:"id,pk" gorm:"primaryKey"`
	Customer   string `db:"customer" bun:"customer"`
	TotalCents int64  `db:"total_cents" bun:"total_cents"`
	Path       string `db:"path" bun:"path"`
}

type demoFlags struct {
	messages    int
	duration    time.Duration
	workers     int
	databaseURL string
	natsURL     string
	schema      string
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f demoFlags
	fs := newFlagSet("demo", `Runs an order service end to end: orders and their messages are written through
database/sql, sqlx, bun and GORM, delivered to NATS JetStream by direct dispatch,
ordered lane workers and recovery, consumed back and checked (every message
arrived, each customer's ordered messages in order). Without --database-url it
starts a throwaway PostgreSQL cluster; without --nats-url an embedded NATS server.
The demo empties its tables in --schema when it starts.`,
		"relayer demo --messages 5000 --workers 3", stderr)
	fs.IntVar(&f.messages, "messages", demoMessagesDefault, fmt.Sprintf("messages to write, 1 to %d", demoMessagesMax))
	fs.DurationVar(&f.duration, "duration", demoDurationDefault, "give up when not everything arrived by then")
	fs.IntVar(&f.workers, "workers", demoWorkersDefault, fmt.Sprintf("ordered workers, 1 to %d", demoWorkersMax))
	fs.StringVar(&f.databaseURL, "database-url", "", "PostgreSQL URL to use instead of a throwaway cluster")
	fs.StringVar(&f.natsURL, "nats-url", "", "NATS server with JetStream to use instead of an embedded one")
	fs.StringVar(&f.schema, "schema", demoSchemaDefault, "schema of the demo's tables")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case f.messages < 1 || f.messages > demoMessagesMax:
		return usagef("--messages %d: must be 1 to %d", f.messages, demoMessagesMax)
	case f.duration <= 0:
		return usagef("--duration %s: must be positive", f.duration)
	case f.workers < 1 || f.workers > demoWorkersMax:
		return usagef("--workers %d: must be 1 to %d", f.workers, demoWorkersMax)
	}
	if err := (store.Options{Schema: f.schema}).Validate(); err != nil {
		return usagef("--schema %q: %v", f.schema, reason(err, f.schema))
	}
	d := &demo{flags: f, stdout: stdout, stderr: stderr}
	defer d.cleanup()
	return d.run(ctx)
}

// demo is one run: what it started (stopped in reverse by cleanup) and what
// it observed.
type demo struct {
	flags          demoFlags
	stdout, stderr io.Writer
	cleanups       []func()

	token   string // makes stream, subjects and worker names unique to the run
	db      *sql.DB
	js      jetstream.JetStream
	stream  string
	subject [kindCount]string
	track   tracker
}

func (d *demo) onCleanup(f func()) { d.cleanups = append(d.cleanups, f) }

func (d *demo) cleanup() {
	for i := len(d.cleanups) - 1; i >= 0; i-- {
		d.cleanups[i]()
	}
	d.cleanups = nil
}

func (d *demo) logf(format string, args ...any) {
	fmt.Fprintf(d.stdout, format+"\n", args...)
}

func (d *demo) run(ctx context.Context) error {
	var b [4]byte
	rand.Read(b[:])
	d.token = hex.EncodeToString(b[:])
	d.track.init()

	if err := d.startDatabase(ctx); err != nil {
		return err
	}
	if err := d.startNATS(ctx); err != nil {
		return err
	}
	if err := d.prepareTables(ctx); err != nil {
		return err
	}
	tr, err := relayernats.New(d.js, relayernats.Options{Stream: d.stream})
	if err != nil {
		return err
	}

	var routes relayer.Routes
	for _, err := range []error{
		relayer.AddType[OrderPlaced](&routes, relayer.Route{Transport: "nats", Destination: d.subject[kindPlaced]}),
		relayer.AddType[CustomerActivity](&routes, relayer.Route{Transport: "nats", Destination: d.subject[kindActivity], Ordered: true}),
		relayer.AddType[PaymentReminder](&routes, relayer.Route{Transport: "nats", Destination: d.subject[kindReminder]}),
	} {
		if err != nil {
			return err
		}
	}
	outbox := relayer.Outbox{Schema: d.flags.schema, Routes: &routes, Transports: map[string]relayer.Transport{"nats": tr}}
	log := slog.New(slog.NewTextHandler(d.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	if err := d.consume(ctx); err != nil {
		return err
	}
	runner, err := dispatch.NewRunner(d.db, outbox, dispatch.RunnerOptions{
		Direct:         dispatch.DirectOptions{QueueCapacity: 4096},
		Recovery:       dispatch.RecoveryOptions{PollInterval: 250 * time.Millisecond, Owner: "relayer-demo-" + d.token},
		Ordered:        dispatch.OrderedOptions{PollInterval: 50 * time.Millisecond},
		OrderedWorkers: d.flags.workers,
		DisableCleanup: true,
		Logger:         log,
	})
	if err != nil {
		return err
	}
	// Stopped before the NATS connection and the database close, gracefully
	// within stopTimeout rather than cancelled mid-batch; Ctrl-C stops the
	// writers.
	var stopOnce sync.Once
	stopWorkers := func() {
		stopOnce.Do(func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
			defer cancel()
			if err := runner.Stop(sctx); err != nil {
				fmt.Fprintf(d.stderr, "relayer demo: stopping the dispatchers: %v\n", err)
			}
		})
	}
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	d.onCleanup(cancelWork)
	d.onCleanup(stopWorkers)
	if err := runner.Start(workCtx); err != nil {
		return err
	}

	writer, err := enlist.NewWriter(outbox, enlist.Options{Listener: runner,
		Logger: slog.New(slog.NewTextHandler(d.stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		return err
	}
	paths, err := d.entryPoints(writer)
	if err != nil {
		return err
	}

	d.logf("writing %d messages through %s; %d ordered workers; delivering to NATS JetStream stream %s",
		d.flags.messages, strings.Join(demoPaths[:], ", "), d.flags.workers, d.stream)
	bar := startProgress(d.stdout, d.flags.messages, func() (int, int) {
		return int(d.track.written.Load()), int(d.track.delivered.Load())
	})
	start := time.Now()
	writeErr := make(chan error, 1)
	go func() { writeErr <- d.write(ctx, paths) }()

	var runErr error
	deadline := time.NewTimer(d.flags.duration)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	writing := true
wait:
	for {
		select {
		case err := <-writeErr:
			writing = false
			if err != nil {
				runErr = fmt.Errorf("writing orders: %w", err)
				break wait
			}
		case <-tick.C:
			if !writing && d.track.delivered.Load() >= d.track.written.Load() {
				break wait
			}
		case <-deadline.C:
			runErr = fmt.Errorf("not everything arrived within --duration %s", d.flags.duration)
			break wait
		case <-ctx.Done():
			runErr = errors.New("interrupted")
			break wait
		}
	}
	elapsed := time.Since(start)
	bar.Stop()
	if writing {
		<-writeErr // ctx ended or the deadline passed: the writers stop at their next transaction
	}
	time.Sleep(100 * time.Millisecond) // let a late duplicate show up before counting
	stopWorkers()

	by := deliveredBy{direct: runner.Direct().Stats().Sent, recovery: runner.Recovery().Stats().Sent}
	for _, o := range runner.Ordered() {
		by.ordered += o.Stats().Sent
	}
	sum := d.track.summarize(start, elapsed)
	d.printSummary(sum, by, runErr)
	if runErr != nil {
		return runErr
	}
	if !sum.ok() {
		return errors.New(sum.problem())
	}
	return nil
}

// startDatabase opens --database-url or a throwaway cluster.
func (d *demo) startDatabase(ctx context.Context) error {
	url := d.flags.databaseURL
	if url == "" {
		d.logf("starting a throwaway PostgreSQL cluster (use --database-url to bring your own)")
		sctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		cluster, err := pgcluster.Start(sctx, pgcluster.Options{Install: true,
			Logf: func(format string, args ...any) { fmt.Fprintf(d.stderr, "postgres: "+format+"\n", args...) }})
		cancel()
		if err != nil {
			return fmt.Errorf("start a throwaway PostgreSQL cluster: %w (or pass --database-url)", err)
		}
		d.onCleanup(func() {
			if err := cluster.Stop(); err != nil {
				fmt.Fprintf(d.stderr, "relayer demo: stopping PostgreSQL: %v\n", err)
			}
		})
		url = cluster.URL()
	}
	db, err := openDB(ctx, url)
	if err != nil {
		return err
	}
	// Writers and the runner's workers (dispatch.Runner.Connections) pin or
	// borrow connections at once.
	db.SetMaxOpenConns(16 + 2*d.flags.workers)
	db.SetMaxIdleConns(16 + 2*d.flags.workers)
	d.db = db
	d.onCleanup(func() { db.Close() })
	return nil
}

// startNATS connects to --nats-url or to an embedded JetStream server, and
// creates the run's stream.
func (d *demo) startNATS(ctx context.Context) error {
	url := d.flags.natsURL
	if url == "" {
		dir, err := os.MkdirTemp("", "relayer-demo-nats-")
		if err != nil {
			return err
		}
		d.onCleanup(func() { os.RemoveAll(dir) })
		s, err := server.NewServer(&server.Options{
			Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
		})
		if err != nil {
			return fmt.Errorf("embedded NATS server: %w", err)
		}
		s.Start()
		d.onCleanup(func() {
			s.Shutdown()
			s.WaitForShutdown()
		})
		if !s.ReadyForConnections(10 * time.Second) {
			return errors.New("embedded NATS server did not get ready within 10s")
		}
		url = s.ClientURL()
	}
	nc, err := nats.Connect(url, nats.Name("relayer-demo"), nats.MaxReconnects(0))
	if err != nil {
		return fmt.Errorf("--nats-url: %w", err)
	}
	d.onCleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		return err
	}
	d.js = js
	d.stream = "RELAYER_DEMO_" + strings.ToUpper(d.token)
	prefix := "relayer-demo." + d.token + "."
	d.subject = [kindCount]string{prefix + "orders.placed", prefix + "customers.activity", prefix + "orders.reminders"}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(sctx, jetstream.StreamConfig{
		Name: d.stream, Subjects: []string{prefix + ">"}, Storage: jetstream.MemoryStorage, Duplicates: 2 * time.Minute,
	}); err != nil {
		return fmt.Errorf("create JetStream stream %s: %w", d.stream, err)
	}
	d.onCleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = js.DeleteStream(dctx, d.stream)
	})
	return nil
}

// ordersTable is the quoted name of the business table.
func (d *demo) ordersTable() string { return pgx.Identifier{d.flags.schema, "demo_orders"}.Sanitize() }

// prepareTables migrates the outbox and empties it and the orders table, so
// that rows of an earlier, interrupted run are not delivered into this one.
func (d *demo) prepareTables(ctx context.Context) error {
	opts := store.Options{Schema: d.flags.schema}
	if _, err := store.Migrate(ctx, d.db, opts); err != nil {
		return err
	}
	t := tablesOf(opts)
	_, err := d.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+d.ordersTable()+` (
    id          text PRIMARY KEY,
    customer    text NOT NULL,
    total_cents bigint NOT NULL,
    path        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
TRUNCATE `+d.ordersTable()+`, `+t.outbox+`, `+t.dead+`, `+t.leases)
	if err != nil {
		return fmt.Errorf("prepare demo tables: %w", err)
	}
	return nil
}

// consume reads the run's stream back with an ordered consumer, which hands
// over messages in stream order.
func (d *demo) consume(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cons, err := d.js.OrderedConsumer(sctx, d.stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return fmt.Errorf("consumer on %s: %w", d.stream, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { d.track.received(m, d.subject) })
	if err != nil {
		return fmt.Errorf("consume %s: %w", d.stream, err)
	}
	d.onCleanup(cc.Stop)
	return nil
}

// publishFunc writes one order and its messages in one transaction through
// one entry point.
type publishFunc func(ctx context.Context, o *demoOrder, msgs []relayer.Outgoing) error

func (d *demo) entryPoints(w *enlist.Writer) ([len(demoPaths)]publishFunc, error) {
	table := d.ordersTable()
	insert := `INSERT INTO ` + table + ` (id, customer, total_cents, path) VALUES ($1, $2, $3, $4)`

	sqlxDB := sqlx.NewDb(d.db, "pgx")
	sqlxW := relayersqlx.NewWriter(w)
	namedInsert := `INSERT INTO ` + table + ` (id, customer, total_cents, path) VALUES (:id, :customer, :total_cents, :path)`

	// The bun.DB and gorm.DB share d.db; closing d.db closes them.
	bunDB := bun.NewDB(d.db, pgdialect.New()).WithQueryHook(relayerbun.NewHook(w))

	gormDB, err := gorm.Open(postgres.New(postgres.Config{Conn: d.db}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return [len(demoPaths)]publishFunc{}, fmt.Errorf("gorm: %w", err)
	}
	if err := gormDB.Use(relayergorm.Plugin(w)); err != nil {
		return [len(demoPaths)]publishFunc{}, err
	}
	gormTable := d.flags.schema + ".demo_orders" // validated; GORM quotes each part

	return [len(demoPaths)]publishFunc{
		func(ctx context.Context, o *demoOrder, msgs []relayer.Outgoing) error {
			return w.RunInTx(ctx, d.db, nil, func(tx *enlist.Tx) error {
				if _, err := tx.ExecContext(ctx, insert, o.ID, o.Customer, o.TotalCents, o.Path); err != nil {
					return err
				}
				return tx.PublishAll(ctx, msgs...)
			})
		},
		func(ctx context.Context, o *demoOrder, msgs []relayer.Outgoing) error {
			return sqlxW.RunInTx(ctx, sqlxDB, nil, func(tx *relayersqlx.Tx) error {
				if _, err := tx.NamedExecContext(ctx, namedInsert, o); err != nil {
					return err
				}
				return tx.PublishAll(ctx, msgs...)
			})
		},
		func(ctx context.Context, o *demoOrder, msgs []relayer.Outgoing) error {
			return bunDB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				if _, err := tx.NewInsert().Model(o).ModelTableExpr(table).Exec(ctx); err != nil {
					return err
				}
				return relayerbun.PublishAll(ctx, tx, msgs...)
			})
		},
		func(ctx context.Context, o *demoOrder, msgs []relayer.Outgoing) error {
			return gormDB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				if err := tx.Table(gormTable).Create(o).Error; err != nil {
					return err
				}
				return relayergorm.PublishAll(tx, msgs...)
			})
		},
	}, nil
}

// write runs demoWriters feeds concurrently until the messages are written.
// Order i carries an ordered CustomerActivity and, budget permitting, an
// OrderPlaced or (every demoReminderEvery-th order) a scheduled
// PaymentReminder. Feed g writes orders g, g+demoWriters, ... for its own
// customers, rotating through the entry points.
func (d *demo) write(ctx context.Context, paths [len(demoPaths)]publishFunc) error {
	orders := (d.flags.messages + 1) / 2
	// ctx (Ctrl-C) stops the feeds between orders; a transaction in flight
	// finishes, so that whether it committed is known. txCtx ends on the
	// first error.
	txCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for g := range demoWriters {
		wg.Go(func() {
			seq := make(map[string]int)
			for k, i := 0, g; i < orders; k, i = k+1, i+demoWriters {
				if ctx.Err() != nil || txCtx.Err() != nil {
					return
				}
				if err := d.writeOrder(txCtx, paths, seq, g, k, i); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return firstErr
}

// writeOrder writes order i, the k-th of feed g. seq holds the feed's
// customers' last committed sequence numbers.
func (d *demo) writeOrder(ctx context.Context, paths [len(demoPaths)]publishFunc, seqs map[string]int, g, k, i int) error {
	path := (g + k) % len(demoPaths)
	customer := fmt.Sprintf("customer-%02d", g+demoWriters*(k%demoCustomersPerFeed))
	seq := seqs[customer] + 1
	o := &demoOrder{ID: fmt.Sprintf("order-%06d", i+1), Customer: customer, TotalCents: int64(1000 + i%97*25), Path: demoPaths[path]}

	n := min(2, d.flags.messages-2*i)
	msgs := make([]relayer.Outgoing, 0, n)
	sent := make([]sentMsg, 0, n)
	// The ids are chosen here so that the checker knows them at commit.
	add := func(kind int, v any, due time.Time, opts ...relayer.Option) error {
		id, err := relayer.NewID()
		if err != nil {
			return err
		}
		msgs = append(msgs, relayer.NewOutgoing(v, append(opts, relayer.WithID(id))...))
		sent = append(sent, sentMsg{id: id, kind: kind, path: path, due: due})
		return nil
	}
	if err := add(kindActivity, CustomerActivity{Customer: customer, Seq: seq, Order: o.ID, Path: o.Path}, time.Time{}, relayer.Key(customer)); err != nil {
		return err
	}
	if n == 2 {
		var err error
		if (i+1)%demoReminderEvery == 0 {
			due := time.Now().Add(demoScheduleDelay).UTC().Truncate(time.Microsecond)
			err = add(kindReminder, PaymentReminder{Order: o.ID, Customer: customer, Due: due, Path: o.Path}, due, relayer.DeliverAt(due))
		} else {
			err = add(kindPlaced, OrderPlaced{Order: o.ID, Customer: customer, TotalCents: o.TotalCents, Path: o.Path}, time.Time{})
		}
		if err != nil {
			return err
		}
	}
	if err := paths[path](ctx, o, msgs); err != nil {
		return fmt.Errorf("%s: order %s: %w", demoPaths[path], o.ID, err)
	}
	seqs[customer] = seq
	d.track.committed(time.Now(), sent)
	return nil
}

// sentMsg is a committed message as the checker expects it.
type sentMsg struct {
	id   uuid.UUID
	kind int
	path int
	due  time.Time
	at   time.Time // commit returned
}

// recvMsg is the first reception of a message.
type recvMsg struct {
	at   time.Time
	kind int
}

// tracker matches what was committed with what the consumer received.
type tracker struct {
	written   atomic.Int64
	delivered atomic.Int64 // distinct ids received

	mu         sync.Mutex
	sent       map[uuid.UUID]sentMsg
	recv       map[uuid.UUID]recvMsg
	dups       int
	badHeaders int
	lastSeq    map[string]int
	outOfOrder int
	disorder   string // the first out-of-order arrival
}

func (t *tracker) init() {
	t.sent = make(map[uuid.UUID]sentMsg)
	t.recv = make(map[uuid.UUID]recvMsg)
	t.lastSeq = make(map[string]int)
}

func (t *tracker) committed(at time.Time, msgs []sentMsg) {
	t.mu.Lock()
	for _, m := range msgs {
		m.at = at
		t.sent[m.id] = m
	}
	t.mu.Unlock()
	t.written.Add(int64(len(msgs)))
}

func (t *tracker) received(m jetstream.Msg, subjects [kindCount]string) {
	at := time.Now()
	id, err := relayernats.MessageID(m.Headers())
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.badHeaders++
		return
	}
	if _, seen := t.recv[id]; seen {
		t.dups++
		return
	}
	kind := slices.Index(subjects[:], m.Subject())
	t.recv[id] = recvMsg{at: at, kind: kind}
	t.delivered.Add(1)
	if kind != kindActivity {
		return
	}
	var ev CustomerActivity
	if err := json.Unmarshal(m.Data(), &ev); err != nil {
		t.badHeaders++
		return
	}
	if want := t.lastSeq[ev.Customer] + 1; ev.Seq != want {
		t.outOfOrder++
		if t.disorder == "" {
			t.disorder = fmt.Sprintf("%s: got seq %d, want %d", ev.Customer, ev.Seq, want)
		}
	}
	t.lastSeq[ev.Customer] = ev.Seq
}

// summary is what the run observed.
type summary struct {
	written, delivered       [len(demoPaths)]int
	kindWritten, kindDeliv   [kindCount]int
	total, got               int
	missing, unexpected      int
	dups, bad, outOfOrder    int
	disorder                 string
	customers                int
	elapsed                  time.Duration
	immediate                int
	immediateSpan            time.Duration
	latP50, latP99, schedP50 time.Duration
}

func (s summary) ok() bool {
	return s.missing == 0 && s.outOfOrder == 0 && s.unexpected == 0 && s.bad == 0
}

func (s summary) problem() string {
	var p []string
	if s.missing > 0 {
		p = append(p, fmt.Sprintf("%d messages missing", s.missing))
	}
	if s.outOfOrder > 0 {
		p = append(p, fmt.Sprintf("%d ordered messages out of order (first: %s)", s.outOfOrder, s.disorder))
	}
	if s.unexpected > 0 {
		p = append(p, fmt.Sprintf("%d unexpected messages", s.unexpected))
	}
	if s.bad > 0 {
		p = append(p, fmt.Sprintf("%d unreadable messages", s.bad))
	}
	return strings.Join(p, "; ")
}

func (t *tracker) summarize(start time.Time, elapsed time.Duration) summary {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := summary{dups: t.dups, bad: t.badHeaders, outOfOrder: t.outOfOrder, disorder: t.disorder,
		customers: len(t.lastSeq), elapsed: elapsed, total: len(t.sent)}
	var lat, sched []time.Duration
	var lastImmediate time.Time
	for id, m := range t.sent {
		s.written[m.path]++
		s.kindWritten[m.kind]++
		r, ok := t.recv[id]
		if !ok {
			s.missing++
			continue
		}
		s.got++
		s.delivered[m.path]++
		s.kindDeliv[m.kind]++
		if m.due.IsZero() {
			lat = append(lat, max(0, r.at.Sub(m.at)))
			s.immediate++
			if r.at.After(lastImmediate) {
				lastImmediate = r.at
			}
		} else {
			sched = append(sched, max(0, r.at.Sub(m.due)))
		}
	}
	for id := range t.recv {
		if _, ok := t.sent[id]; !ok {
			s.unexpected++
		}
	}
	if !lastImmediate.IsZero() {
		s.immediateSpan = lastImmediate.Sub(start)
	}
	s.latP50, s.latP99 = percentile(lat, 50), percentile(lat, 99)
	s.schedP50 = percentile(sched, 50)
	return s
}

// percentile returns the p-th percentile (nearest rank) of ds, sorting it.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := (len(ds)*p + 99) / 100
	return ds[max(0, min(len(ds)-1, i-1))]
}

// deliveredBy counts the sends each dispatcher reported.
type deliveredBy struct{ direct, ordered, recovery uint64 }

func (d *demo) printSummary(s summary, by deliveredBy, runErr error) {
	w := d.stdout
	fmt.Fprintln(w)
	fmt.Fprintln(w, "summary")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  entry point\twritten\tdelivered")
	for i, p := range demoPaths {
		fmt.Fprintf(tw, "  %s\t%d\t%d\n", p, s.written[i], s.delivered[i])
	}
	fmt.Fprintf(tw, "  total\t%d\t%d\n", s.total, s.got)
	tw.Flush()
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  route\twritten\tdelivered")
	for k := range kindCount {
		fmt.Fprintf(tw, "  %s\t%d\t%d\n", kindNames[k], s.kindWritten[k], s.kindDeliv[k])
	}
	tw.Flush()
	order := "verified"
	if s.outOfOrder > 0 {
		order = fmt.Sprintf("VIOLATED %d times (first: %s)", s.outOfOrder, s.disorder)
	}
	fmt.Fprintf(w, "sent by: direct %d, ordered workers %d, recovery %d\n", by.direct, by.ordered, by.recovery)
	fmt.Fprintf(w, "per-key order: %s over %d customers\n", order, s.customers)
	fmt.Fprintf(w, "duplicates seen: %d\n", s.dups)
	if s.immediate > 0 && s.immediateSpan > 0 {
		fmt.Fprintf(w, "throughput: %.0f msg/s (%d immediate messages written and delivered in %s)\n",
			float64(s.immediate)/s.immediateSpan.Seconds(), s.immediate, s.immediateSpan.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "commit-to-broker latency: p50 %s, p99 %s\n", roundLatency(s.latP50), roundLatency(s.latP99))
	if s.kindDeliv[kindReminder] > 0 {
		fmt.Fprintf(w, "scheduled messages arrived p50 %s after they were due\n", roundLatency(s.schedP50))
	}
	fmt.Fprintf(w, "elapsed: %s\n", s.elapsed.Round(time.Millisecond))
	switch {
	case runErr != nil && !s.ok():
		fmt.Fprintf(w, "result: FAILED: %v; %s\n", runErr, s.problem())
	case runErr != nil:
		fmt.Fprintf(w, "result: FAILED: %v\n", runErr)
	case !s.ok():
		fmt.Fprintf(w, "result: FAILED: %s\n", s.problem())
	default:
		fmt.Fprintf(w, "result: OK, all %d messages delivered\n", s.total)
	}
}

func roundLatency(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}
