package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/consume"
	"github.com/relayer-go/relayer/store"
	relayernats "github.com/relayer-go/relayer/transport/nats"
)

// demoBillingInstances is how many billing consumers share the orders, as
// replicas of one service would: each message's invoice commits once
// whichever of them gets it, and however often.
const demoBillingInstances = 2

// invoicesTable is the quoted name of the billing service's table.
func (d *demo) invoicesTable() string {
	return pgx.Identifier{d.flags.schema, "demo_invoices"}.Sanitize()
}

// startBilling runs the demo's second service: consumers of the placed
// orders that write one invoice per order through package consume, in a
// transaction with their inbox record. They stop at cleanup, before the
// NATS connection and the database close.
func (d *demo) startBilling(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cons, err := d.js.CreateOrUpdateConsumer(sctx, d.stream, jetstream.ConsumerConfig{
		Durable:       "billing",
		AckPolicy:     jetstream.AckExplicitPolicy,
		FilterSubject: d.subject[kindPlaced],
		AckWait:       10 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("billing consumer on %s: %w", d.stream, err)
	}
	c, err := consume.New(d.db, func(ctx context.Context, tx *consume.Tx, m *relayer.Message) error {
		var o OrderPlaced
		if err := json.Unmarshal(m.Body, &o); err != nil {
			return fmt.Errorf("%w: %w", relayer.ErrPermanent, err)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO `+d.invoicesTable()+` (order_id, message_id, total_cents) VALUES ($1, $2, $3)`, o.Order, m.ID, o.TotalCents)
		return err
	}, consume.Options{
		Name:   "relayer-demo-billing-" + d.token,
		Tables: store.Tables{Schema: d.flags.schema},
		Logger: slog.New(slog.NewTextHandler(d.stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return err
	}
	d.billing = c
	bctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	for range demoBillingInstances {
		wg.Go(func() {
			err := relayernats.Consume(bctx, c, d.js, cons, relayernats.ConsumeOptions{
				DeadLetterSubject: d.subject[kindPlaced] + ".dead", Concurrency: 4,
			})
			if err != nil {
				fmt.Fprintf(d.stderr, "billing consumer: %v\n", err)
			}
		})
	}
	d.onCleanup(func() {
		stop()
		wg.Wait()
	})
	return nil
}

// billingCaughtUp reports whether the billing consumers settled as many
// messages as the placed orders delivered.
func (d *demo) billingCaughtUp(placed int) bool {
	st := d.billing.Stats()
	return int(st.Handled+st.Duplicates+st.DeadLettered) >= placed
}

// invoices is what the billing service's table holds once the run is
// over: how many invoices, for how many distinct orders.
type invoices struct {
	rows, orders int
	skipped      uint64 // redeliveries the inbox acknowledged without a new invoice
}

func (d *demo) countInvoices(ctx context.Context) (invoices, error) {
	var inv invoices
	err := d.db.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT order_id) FROM `+d.invoicesTable()).Scan(&inv.rows, &inv.orders)
	inv.skipped = d.billing.Stats().Duplicates
	return inv, err
}
