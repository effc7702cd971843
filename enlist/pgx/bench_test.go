package relayerpgx_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/enlist/enlisttest"
	relayerpgx "github.com/relayer-go/relayer/enlist/pgx"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

// BenchmarkEnlistmentCost measures a business transaction that inserts one
// row and publishes 1, 10 or 100 messages (one PublishAll), on one
// connection: through database/sql (pgx's stdlib driver), through pgx's
// native interface (this package), and, for comparison, with the same rows
// written by pgx's COPY instead of the multi-row INSERT, and the minimal
// hand-written outbox: a table of its own with an id, a payload, headers and
// a creation time, a primary key only, written with one multi-row INSERT of
// constant bytes through pgx (the database's limit for an outbox).
// round-trips/op counts the client's flushes to the server. Compare them in
// one run.
func BenchmarkEnlistmentCost(b *testing.B) {
	ctx := context.Background()
	db, sqlWrites := testdb.OpenCounting(b)
	db.SetMaxOpenConns(1)
	pool, pgxWrites := countingPool(b, 1)
	schema := testdb.NewSchema(b)
	if _, err := store.Migrate(ctx, db, store.Tables{Schema: schema}); err != nil {
		b.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE "`+schema+`".orders (id bigint PRIMARY KEY)`); err != nil {
		b.Fatal(err)
	}
	var routes relayer.Routes
	_ = relayer.AddType[enlisttest.Placed](&routes, relayer.Route{Transport: "mem", Destination: "orders"})
	w, err := enlist.NewWriter(relayer.Outbox{Schema: schema, Routes: &routes}, enlist.Options{})
	if err != nil {
		b.Fatal(err)
	}
	pw := relayerpgx.NewWriter(w)
	insert := `INSERT INTO "` + schema + `".orders (id) VALUES ($1)`
	if _, err := db.ExecContext(ctx, `CREATE TABLE "`+schema+`".minimal (
    id         uuid PRIMARY KEY,
    payload    bytea NOT NULL,
    headers    bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
		b.Fatal(err)
	}
	minimalHeaders, err := headers.Encode([]headers.Header{{Name: relayer.HeaderContentType, Value: []byte("application/json")}})
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	contentType := []headers.Header{{Name: relayer.HeaderContentType, Value: []byte("application/json")}}
	columns := []string{"id", "message_type", "transport", "destination", "body", "headers", "created_at"}
	for _, n := range []int{1, 10, 100} {
		msgs := make([]relayer.Outgoing, n)
		fill := func(id int64) {
			for i := range msgs {
				msgs[i] = relayer.NewOutgoing(enlisttest.Placed{N: int(id)})
			}
		}
		run := func(b *testing.B, writes *atomic.Int64, tx func(id int64) error) {
			b.ReportAllocs()
			start := writes.Load()
			for b.Loop() {
				id := next.Add(1)
				fill(id)
				if err := tx(id); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(writes.Load()-start)/float64(b.N), "round-trips/op")
		}
		b.Run(fmt.Sprintf("messages=%d/database-sql", n), func(b *testing.B) {
			run(b, sqlWrites, func(id int64) error {
				return w.RunInTx(ctx, db, nil, func(tx *enlist.Tx) error {
					if _, err := tx.ExecContext(ctx, insert, id); err != nil {
						return err
					}
					return tx.PublishAll(ctx, msgs...)
				})
			})
		})
		b.Run(fmt.Sprintf("messages=%d/pgx", n), func(b *testing.B) {
			run(b, pgxWrites, func(id int64) error {
				return pw.RunInTx(ctx, pool, pgx.TxOptions{}, func(tx *relayerpgx.Tx) error {
					if _, err := tx.Exec(ctx, insert, id); err != nil {
						return err
					}
					return tx.PublishAll(ctx, msgs...)
				})
			})
		})
		b.Run(fmt.Sprintf("messages=%d/minimal", n), func(b *testing.B) {
			query := minimalInsert(schema, n)
			payload := []byte(`{"N":1}`)
			args := make([]any, 0, 3*n)
			run(b, pgxWrites, func(id int64) error {
				return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, insert, id); err != nil {
						return err
					}
					var err error
					if args, err = minimalArgs(args, n, payload, minimalHeaders); err != nil {
						return err
					}
					_, err = tx.Exec(ctx, query, args...)
					return err
				})
			})
		})
		// The minimal loop's transaction through database/sql, the
		// interface of the database-sql writer: what that interface costs
		// any outbox.
		b.Run(fmt.Sprintf("messages=%d/minimal-database-sql", n), func(b *testing.B) {
			query := minimalInsert(schema, n)
			payload := []byte(`{"N":1}`)
			args := make([]any, 0, 3*n)
			run(b, sqlWrites, func(id int64) error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				defer tx.Rollback()
				if _, err := tx.ExecContext(ctx, insert, id); err != nil {
					return err
				}
				if args, err = minimalArgs(args, n, payload, minimalHeaders); err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, query, args...); err != nil {
					return err
				}
				return tx.Commit()
			})
		})
		// The rows the writer would build, written with COPY: the
		// alternative the multi-row INSERT was measured against.
		b.Run(fmt.Sprintf("messages=%d/pgx-copy", n), func(b *testing.B) {
			run(b, pgxWrites, func(id int64) error {
				return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, insert, id); err != nil {
						return err
					}
					now := time.Now().UTC().Truncate(time.Microsecond)
					rows := make([][]any, len(msgs))
					for i := range msgs {
						body, err := json.Marshal(msgs[i].Message)
						if err != nil {
							return err
						}
						hdr, err := headers.Encode(contentType)
						if err != nil {
							return err
						}
						mid, err := relayer.NewID()
						if err != nil {
							return err
						}
						rows[i] = []any{mid.String(), "enlisttest.Placed", "mem", "orders", body, hdr, now}
					}
					_, err := tx.CopyFrom(ctx, pgx.Identifier{schema, "outbox"}, columns, pgx.CopyFromRows(rows))
					return err
				})
			})
		})
	}
}

// minimalInsert returns the minimal loop's multi-row INSERT of n messages
// into schema's minimal table.
func minimalInsert(schema string, n int) string {
	var q strings.Builder
	q.WriteString(`INSERT INTO "` + schema + `".minimal (id, payload, headers) VALUES `)
	for i := range n {
		if i > 0 {
			q.WriteByte(',')
		}
		fmt.Fprintf(&q, "($%d, $%d, $%d)", 3*i+1, 3*i+2, 3*i+3)
	}
	return q.String()
}

// minimalArgs returns the parameters of the minimal loop's insert of n
// messages, each with a new id, in args[:0].
func minimalArgs(args []any, n int, payload, hdrs []byte) ([]any, error) {
	args = args[:0]
	for range n {
		id, err := uuid.NewV7()
		if err != nil {
			return args, err
		}
		args = append(args, id, payload, hdrs)
	}
	return args, nil
}
