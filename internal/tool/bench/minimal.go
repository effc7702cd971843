package bench

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
)

// Minimal is the smallest outbox a service could write by hand, as a
// contender: its own table of four columns (id, payload, headers,
// created_at) with a primary key and nothing else, written and drained
// through pgx's native API on pinned connections. Its producer inserts the
// business row and one multi-row INSERT of the messages; two workers each
// delete up to 1,000 rows per DELETE … RETURNING, hand them to the sink
// before the commit, and poll every 10 ms when idle. It is the database's
// limit for an outbox; the hand-written loop, on Relayer's own table,
// shows what Relayer's layout costs on top of it.
type Minimal struct{}

// Name implements [Contender].
func (Minimal) Name() string { return "minimal loop" }

// Runs implements [Contender]: every scenario but ordered, which it cannot
// keep.
func (Minimal) Runs(scenario string) bool { return scenario != ScenarioOrdered }

// New implements [Contender].
func (Minimal) New(ctx context.Context, env Env) (Instance, error) {
	table := quoteTable(env.Schema, env.Prefix+"minimal")
	if _, err := env.DB.ExecContext(ctx, `CREATE TABLE `+table+` (
    id         uuid PRIMARY KEY,
    payload    bytea NOT NULL,
    headers    bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
		return nil, err
	}
	hdrs, err := headers.Encode(append([]headers.Header{{Name: relayer.HeaderContentType, Value: []byte("application/octet-stream")}}, env.Headers...))
	if err != nil {
		return nil, err
	}
	return &minimalInstance{env: env, table: table, hdrs: hdrs}, nil
}

// MinimalSQL is [Minimal] whose producers write through database/sql (a
// *sql.Tx on pgx's driver) instead of pgx's native API: what that interface
// costs an outbox of any layout, to set beside the writers of Relayer that
// take a *sql.DB. It runs in the enlist scenario only.
type MinimalSQL struct{}

// Name implements [Contender].
func (MinimalSQL) Name() string { return "minimal loop (database/sql)" }

// Runs implements [Contender].
func (MinimalSQL) Runs(scenario string) bool { return scenario == ScenarioEnlist }

// New implements [Contender].
func (MinimalSQL) New(ctx context.Context, env Env) (Instance, error) {
	in, err := Minimal{}.New(ctx, env)
	if err != nil {
		return nil, err
	}
	in.(*minimalInstance).viaSQL = true
	return in, nil
}

type minimalInstance struct {
	// viaSQL: producers write through database/sql (MinimalSQL).
	viaSQL  bool
	env     Env
	table   string
	hdrs    []byte
	drainer *drainer    // set by Start
	conns   []*sql.Conn // the workers', closed at Stop
}

// minimalInsert returns the multi-row INSERT of n messages into table.
func minimalInsert(table string, n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO ` + table + ` (id, payload, headers) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		p := i * 3
		b.WriteString("($" + strconv.Itoa(p+1) + ",$" + strconv.Itoa(p+2) + ",$" + strconv.Itoa(p+3) + ")")
	}
	return b.String()
}

// native runs f on the pgx connection under c.
func native(c *sql.Conn, f func(*pgx.Conn) error) error {
	return c.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errors.New("bench: the minimal loop needs pgx's database/sql driver")
		}
		return f(sc.Conn())
	})
}

// commit runs one transaction on a connection of the pool: the business
// row when business is set, then n messages in one statement; it returns
// their ids in ids[:0].
func (m *minimalInstance) commit(ctx context.Context, business bool, insert string, n int, args []any, ids []uuid.UUID) ([]uuid.UUID, error) {
	ids = ids[:0]
	if m.viaSQL {
		return m.commitSQL(ctx, business, insert, n, args, ids)
	}
	c, err := m.env.DB.Conn(ctx)
	if err != nil {
		return ids, err
	}
	defer c.Close()
	err = native(c, func(pc *pgx.Conn) error {
		tx, err := pc.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if business {
			if _, err := tx.Exec(ctx, `INSERT INTO `+m.env.Orders+` (note) VALUES ($1)`, "order"); err != nil {
				return err
			}
		}
		if ids, args, err = m.rows(n, args, ids); err != nil {
			return err
		}
		if n > 0 {
			if _, err := tx.Exec(ctx, insert, args...); err != nil {
				return err
			}
		}
		return tx.Commit(ctx)
	})
	return ids, err
}

// commitSQL is commit through database/sql.
func (m *minimalInstance) commitSQL(ctx context.Context, business bool, insert string, n int, args []any, ids []uuid.UUID) ([]uuid.UUID, error) {
	tx, err := m.env.DB.BeginTx(ctx, nil)
	if err != nil {
		return ids, err
	}
	defer tx.Rollback()
	if business {
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+m.env.Orders+` (note) VALUES ($1)`, "order"); err != nil {
			return ids, err
		}
	}
	if ids, args, err = m.rows(n, args, ids); err != nil {
		return ids, err
	}
	if n > 0 {
		if _, err := tx.ExecContext(ctx, insert, args...); err != nil {
			return ids, err
		}
	}
	return ids, tx.Commit()
}

// rows appends n messages' ids to ids and their parameters to args[:0].
func (m *minimalInstance) rows(n int, args []any, ids []uuid.UUID) ([]uuid.UUID, []any, error) {
	args = args[:0]
	for range n {
		id, err := uuid.NewV7()
		if err != nil {
			return ids, args, err
		}
		ids = append(ids, id)
		args = append(args, id, m.env.Body, m.hdrs)
	}
	return ids, args, nil
}

// Producer implements [Instance].
func (m *minimalInstance) Producer(_, perTx int) (func(context.Context) error, error) {
	return produce(m.env, minimalInsert(m.table, perTx), 3, perTx, m.commit), nil
}

// Fill implements [Instance], 1,000 messages per statement.
func (m *minimalInstance) Fill(ctx context.Context, n int) ([]uuid.UUID, error) {
	return fill(ctx, m.env, m.table, func(n int) string { return minimalInsert(m.table, n) }, 3, n, m.commit)
}

// Start implements [Instance]: two workers, each on a connection pinned
// until Stop.
func (m *minimalInstance) Start(ctx context.Context) error {
	take := `DELETE FROM ` + m.table + ` WHERE id = ANY(ARRAY(
    SELECT id FROM ` + m.table + ` ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED))
RETURNING id, payload, headers`
	conns := make([]*sql.Conn, loopDrainers)
	for i := range conns {
		c, err := m.env.DB.Conn(ctx)
		if err != nil {
			return err
		}
		m.conns = append(m.conns, c)
		conns[i] = c
	}
	m.drainer = newDrainer(loopDrainers, 10*time.Millisecond, func(ctx context.Context, w int) (int, error) {
		return m.once(ctx, conns[w], take)
	})
	return m.drainer.start(ctx)
}

// once takes, sends and commits one batch on c, returning its size.
func (m *minimalInstance) once(ctx context.Context, c *sql.Conn, take string) (int, error) {
	var msgs []*relayer.Message
	err := native(c, func(pc *pgx.Conn) error {
		tx, err := pc.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		rows, err := tx.Query(ctx, take)
		if err != nil {
			return err
		}
		for rows.Next() {
			msg := &relayer.Message{Type: eventType, Transport: "bench", Destination: m.env.Destination}
			var hdrs []byte
			if err := rows.Scan(&msg.ID, &msg.Body, &hdrs); err != nil {
				rows.Close()
				return err
			}
			if msg.Headers, err = headers.Decode(hdrs, nil); err != nil {
				rows.Close()
				return err
			}
			msgs = append(msgs, msg)
		}
		if err := rows.Err(); err != nil || len(msgs) == 0 {
			return err
		}
		if err := sendAll(ctx, m.env.Sink, msgs); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
	return len(msgs), err
}

// Stop implements [Instance]: it stops the workers and returns their
// connections.
func (m *minimalInstance) Stop(ctx context.Context) error {
	var err error
	if m.drainer != nil {
		err = m.drainer.stop(ctx)
	}
	for _, c := range m.conns {
		c.Close()
	}
	m.conns = nil
	return err
}

// Err implements [Instance].
func (m *minimalInstance) Err() error {
	if m.drainer == nil {
		return nil
	}
	return m.drainer.failed()
}

// Backlog implements [Instance].
func (m *minimalInstance) Backlog(ctx context.Context) (n int64, err error) {
	err = m.env.DB.QueryRowContext(ctx, `SELECT count(*) FROM `+m.table).Scan(&n)
	return n, err
}
