package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
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

// The five entry points, in the order the summary lists them.
var demoPaths = [...]string{"database/sql", "sqlx", "bun", "gorm", "pgx"}

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
	fs := command.NewFlagSet("demo", `Runs an order service end to end: orders and their messages are written through
database/sql, sqlx, bun, GORM and pgx, delivered to NATS JetStream by direct dispatch,
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
	if err := command.Parse(fs, args); err != nil {
		return err
	}
	switch {
	case f.messages < 1 || f.messages > demoMessagesMax:
		return command.Usagef("--messages %d: must be 1 to %d", f.messages, demoMessagesMax)
	case f.duration <= 0:
		return command.Usagef("--duration %s: must be positive", f.duration)
	case f.workers < 1 || f.workers > demoWorkersMax:
		return command.Usagef("--workers %d: must be 1 to %d", f.workers, demoWorkersMax)
	}
	if err := (store.Tables{Schema: f.schema}).Validate(); err != nil {
		return command.Usagef("--schema %q: %v", f.schema, command.Reason(err, f.schema))
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
	pool    *pgxpool.Pool // the pgx entry point's
	js      jetstream.JetStream
	stream  string
	subject [kindCount]string
	track   tracker
	billing *consume.Consumer
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
	outbox, err := d.outbox()
	if err != nil {
		return err
	}
	if err := d.consume(ctx); err != nil {
		return err
	}
	if err := d.startBilling(ctx); err != nil {
		return err
	}
	runner, stopWorkers, err := d.startRunner(ctx, outbox)
	if err != nil {
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
	writing, runErr := d.waitDelivered(ctx, writeErr)
	elapsed := time.Since(start)
	bar.Stop()
	if writing {
		<-writeErr // ctx ended or the deadline passed: the writers stop at their next transaction
	}
	time.Sleep(100 * time.Millisecond) // let a late duplicate show up before counting
	stopWorkers()

	stats := runner.Stats()
	by := deliveredBy{direct: stats.Direct.Sent, recovery: stats.Recovery.Sent}
	for _, o := range stats.Ordered {
		by.ordered += o.Stats.Sent
	}
	sum := d.track.summarize(start, elapsed)
	if err := d.waitBilling(ctx, sum.kindDeliv[kindPlaced]); err != nil && runErr == nil {
		runErr = err
	}
	if sum.invoices, err = d.countInvoices(ctx); err != nil && runErr == nil {
		runErr = fmt.Errorf("counting invoices: %w", err)
	}
	d.printSummary(sum, by, runErr)
	if runErr != nil {
		return runErr
	}
	if !sum.ok() {
		return errors.New(sum.problem())
	}
	return nil
}

// outbox routes the demo's three message types to the run's NATS subjects.
func (d *demo) outbox() (relayer.Outbox, error) {
	tr, err := relayernats.New(d.js, relayernats.Options{Stream: d.stream})
	if err != nil {
		return relayer.Outbox{}, err
	}
	var routes relayer.Routes
	for _, err := range []error{
		relayer.AddType[OrderPlaced](&routes, relayer.Route{Transport: "nats", Destination: d.subject[kindPlaced]}),
		relayer.AddType[CustomerActivity](&routes, relayer.Route{Transport: "nats", Destination: d.subject[kindActivity], Ordered: true}),
		relayer.AddType[PaymentReminder](&routes, relayer.Route{Transport: "nats", Destination: d.subject[kindReminder]}),
	} {
		if err != nil {
			return relayer.Outbox{}, err
		}
	}
	return relayer.Outbox{Schema: d.flags.schema, Routes: &routes, Transports: map[string]relayer.Transport{"nats": tr}}, nil
}

// startRunner starts direct dispatch, recovery and the ordered workers. They
// are stopped by the returned function, or at cleanup, before the NATS
// connection and the database close: gracefully within stopTimeout rather
// than cancelled mid-batch (Ctrl-C stops the writers, not them).
func (d *demo) startRunner(ctx context.Context, outbox relayer.Outbox) (*dispatch.Runner, func(), error) {
	runner, err := dispatch.NewRunner(d.db, outbox, dispatch.RunnerOptions{
		Direct:         dispatch.DirectOptions{QueueCapacity: 4096},
		Recovery:       dispatch.RecoveryOptions{PollInterval: 250 * time.Millisecond, Owner: "relayer-demo-" + d.token},
		Ordered:        dispatch.OrderedOptions{PollInterval: 50 * time.Millisecond},
		OrderedWorkers: d.flags.workers,
		DisableCleanup: true,
		Logger:         slog.New(slog.NewTextHandler(d.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return nil, nil, err
	}
	var stopOnce sync.Once
	stop := func() {
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
	d.onCleanup(stop)
	if err := runner.Start(workCtx); err != nil {
		return nil, nil, err
	}
	return runner, stop, nil
}

// waitDelivered waits until the writers are done and everything written
// arrived, or until --duration passes, the writers fail or ctx ends. It
// reports whether the writers are still writing, and why the run failed, if
// it did.
// waitBilling waits, up to stopTimeout, for the billing consumers to
// settle the placed orders delivered.
func (d *demo) waitBilling(ctx context.Context, placed int) error {
	deadline := time.Now().Add(stopTimeout)
	for !d.billingCaughtUp(placed) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the billing consumers settled %d of %d orders", d.billing.Stats().Handled, placed)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

func (d *demo) waitDelivered(ctx context.Context, writeErr <-chan error) (bool, error) {
	deadline := time.NewTimer(d.flags.duration)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	writing := true
	for {
		select {
		case err := <-writeErr:
			writing = false
			if err != nil {
				return false, fmt.Errorf("writing orders: %w", err)
			}
		case <-tick.C:
			if !writing && d.track.delivered.Load() >= d.track.written.Load() {
				return false, nil
			}
		case <-deadline.C:
			return writing, fmt.Errorf("not everything arrived within --duration %s", d.flags.duration)
		case <-ctx.Done():
			return writing, errors.New("interrupted")
		}
	}
}
