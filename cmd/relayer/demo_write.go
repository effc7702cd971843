package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jmoiron/sqlx"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	relayerbun "github.com/relayer-go/relayer/enlist/bun"
	relayergorm "github.com/relayer-go/relayer/enlist/gorm"
	relayerpgx "github.com/relayer-go/relayer/enlist/pgx"
	relayersqlx "github.com/relayer-go/relayer/enlist/sqlx"
)

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

	pgxW := relayerpgx.NewWriter(w)

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
		func(ctx context.Context, o *demoOrder, msgs []relayer.Outgoing) error {
			return pgxW.RunInTx(ctx, d.pool, pgx.TxOptions{}, func(tx *relayerpgx.Tx) error {
				if _, err := tx.Exec(ctx, insert, o.ID, o.Customer, o.TotalCents, o.Path); err != nil {
					return err
				}
				return tx.PublishAll(ctx, msgs...)
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
