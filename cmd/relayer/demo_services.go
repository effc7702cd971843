package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/relayer-go/relayer/internal/tool/outboxtool"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/internal/tool/pgcluster"
	"github.com/relayer-go/relayer/store"
)

// startDatabase opens --database-url or a throwaway cluster.
func (d *demo) startDatabase(ctx context.Context) error {
	db, url, stop, err := openOrStartDB(ctx, d.flags.databaseURL, d.stderr, "demo", 16+2*d.flags.workers)
	if err != nil {
		return err
	}
	d.db = db
	d.onCleanup(stop)
	// The pgx entry point publishes in transactions of a pool of its own,
	// as a service on pgx would.
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.MaxConns = demoWriters
	if d.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return err
	}
	d.onCleanup(d.pool.Close)
	return nil
}

// openOrStartDB opens url, or starts a throwaway cluster when url is empty,
// with a pool of conns connections (writers and workers pin or borrow
// connections at once), and returns the URL it opened. stop closes the pool
// and stops the cluster.
func openOrStartDB(ctx context.Context, url string, stderr io.Writer, name string, conns int) (db *sql.DB, dbURL string, stop func(), err error) {
	var cleanups []func()
	stop = func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	if url == "" {
		fmt.Fprintf(stderr, "relayer %s: starting a throwaway PostgreSQL cluster (use --database-url to bring your own)\n", name)
		sctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		cluster, err := pgcluster.Start(sctx, pgcluster.Options{Install: true,
			Logf: func(format string, args ...any) { fmt.Fprintf(stderr, "postgres: "+format+"\n", args...) }})
		cancel()
		if err != nil {
			return nil, "", nil, fmt.Errorf("start a throwaway PostgreSQL cluster: %w (or pass --database-url)", err)
		}
		cleanups = append(cleanups, func() {
			if err := cluster.Stop(); err != nil {
				fmt.Fprintf(stderr, "relayer %s: stopping PostgreSQL: %v\n", name, err)
			}
		})
		url = cluster.URL()
	}
	db, err = command.OpenDB(ctx, url)
	if err != nil {
		stop()
		return nil, "", nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	cleanups = append(cleanups, func() { db.Close() })
	return db, url, stop, nil
}

// startNATS connects to --nats-url or to an embedded JetStream server, and
// creates the run's stream.
func (d *demo) startNATS(ctx context.Context) error {
	js, stop, err := connectJetStream(d.flags.natsURL, "relayer-demo")
	if err != nil {
		return err
	}
	d.onCleanup(stop)
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

// connectJetStream connects to url, or to an embedded JetStream server it
// starts when url is empty. stop disconnects and stops the server.
func connectJetStream(url, name string) (js jetstream.JetStream, stop func(), err error) {
	var cleanups []func()
	stop = func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	if url == "" {
		dir, err := os.MkdirTemp("", name+"-nats-")
		if err != nil {
			return nil, nil, err
		}
		cleanups = append(cleanups, func() { os.RemoveAll(dir) })
		s, err := startEmbeddedNATS(dir)
		if err != nil {
			return nil, nil, err
		}
		cleanups = append(cleanups, func() { stopEmbeddedNATS(s) })
		url = s.ClientURL()
	}
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(0))
	if err != nil {
		return nil, nil, fmt.Errorf("--nats-url: %w", err)
	}
	cleanups = append(cleanups, nc.Close)
	js, err = jetstream.New(nc, jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		return nil, nil, err
	}
	return js, stop, nil
}

// ordersTable is the quoted name of the business table.
func (d *demo) ordersTable() string { return pgx.Identifier{d.flags.schema, "demo_orders"}.Sanitize() }

// prepareTables migrates the outbox and empties it and the orders table, so
// that rows of an earlier, interrupted run are not delivered into this one.
func (d *demo) prepareTables(ctx context.Context) error {
	opts := store.Tables{Schema: d.flags.schema}
	if _, err := store.Migrate(ctx, d.db, opts); err != nil {
		return err
	}
	if err := outboxtool.Reset(ctx, d.db, opts); err != nil {
		return fmt.Errorf("prepare demo tables: %w", err)
	}
	_, err := d.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+d.ordersTable()+` (
    id          text PRIMARY KEY,
    customer    text NOT NULL,
    total_cents bigint NOT NULL,
    path        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS `+d.invoicesTable()+` (
    order_id    text NOT NULL,
    message_id  uuid NOT NULL,
    total_cents bigint NOT NULL
);
TRUNCATE `+d.ordersTable()+`, `+d.invoicesTable())
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

// startEmbeddedNATS starts a NATS server with JetStream in this process, on
// a free loopback port, storing in dir, and waits until it accepts
// connections. Stop it with stopEmbeddedNATS.
func startEmbeddedNATS(dir string) (*server.Server, error) {
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded NATS server: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		stopEmbeddedNATS(s)
		return nil, errors.New("embedded NATS server did not get ready within 10s")
	}
	return s, nil
}

// stopEmbeddedNATS shuts s down and waits until it has.
func stopEmbeddedNATS(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
}
