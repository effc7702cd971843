package bench

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/store"
)

// loopInsert returns the multi-row INSERT of n messages into table.
func loopInsert(table string, n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO ` + table + ` (id, message_type, transport, destination, body, headers, created_at) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		p := i * 7
		b.WriteString("($" + strconv.Itoa(p+1))
		for j := 2; j <= 7; j++ {
			b.WriteString(",$" + strconv.Itoa(p+j))
		}
		b.WriteByte(')')
	}
	return b.String()
}

// Loop is the hand-written loop as a contender: what a service would write
// without a library, and so the database's own limit for the same rows. It
// writes into a table of Relayer's layout (the same columns and indexes).
// Its producer inserts the business row and one multi-row INSERT of the
// messages, with the same ids, bodies and header bytes Relayer stores; two
// workers each delete up to 1,000 rows per statement, hand them to the sink
// before the commit, and poll every 10 ms when idle.
type Loop struct{}

// Name implements [Contender].
func (Loop) Name() string { return "hand-written loop" }

// Runs implements [Contender]: every scenario but ordered.
func (Loop) Runs(scenario string) bool { return scenario != ScenarioOrdered }

// New implements [Contender].
func (Loop) New(ctx context.Context, env Env) (Instance, error) {
	outbox := relayer.Outbox{Schema: env.Schema, TablePrefix: env.Prefix}
	if _, err := store.Migrate(ctx, env.DB, store.OptionsOf(outbox)); err != nil {
		return nil, err
	}
	hdrs, err := headers.Encode(append([]headers.Header{{Name: relayer.HeaderContentType, Value: []byte("application/octet-stream")}}, env.Headers...))
	if err != nil {
		return nil, err
	}
	table := quoteTable(env.Schema, env.Prefix+"outbox")
	return &loopInstance{env: env, table: table, hdrs: hdrs,
		drainer: newLoopDrainer(env.DB, table, env.Sink, loopDrainers, 1000, 10*time.Millisecond)}, nil
}

// loopDrainers is how many goroutines drain the loop's table: as many as
// recovery runs by default (RecoveryOptions.Workers), for a like-for-like
// comparison.
const loopDrainers = 2

type loopInstance struct {
	env     Env
	table   string
	hdrs    []byte
	drainer *loopDrainer
}

// commit runs one transaction: the business row when business is set, then
// n messages in one statement; it returns their ids in ids[:0].
func (l *loopInstance) commit(ctx context.Context, business bool, insert string, n int, args []any, ids []uuid.UUID) ([]uuid.UUID, error) {
	ids = ids[:0]
	tx, err := l.env.DB.BeginTx(ctx, nil)
	if err != nil {
		return ids, err
	}
	defer tx.Rollback()
	if business {
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+l.env.Orders+` (note) VALUES ($1)`, "order"); err != nil {
			return ids, err
		}
	}
	if n > 0 {
		now := time.Now()
		args = args[:0]
		for range n {
			id, err := uuid.NewV7()
			if err != nil {
				return ids, err
			}
			ids = append(ids, id)
			args = append(args, id.String(), eventType, "bench", l.env.Destination, l.env.Body, l.hdrs, now)
		}
		if _, err := tx.ExecContext(ctx, insert, args...); err != nil {
			return ids, err
		}
	}
	return ids, tx.Commit()
}

// Producer implements [Instance].
func (l *loopInstance) Producer(_, perTx int) (func(context.Context) error, error) {
	insert := loopInsert(l.table, perTx)
	args := make([]any, 0, 7*perTx)
	var ids []uuid.UUID
	return func(ctx context.Context) error {
		var err error
		if ids, err = l.commit(ctx, true, insert, perTx, args, ids); err != nil || l.env.Committed == nil {
			return err
		}
		l.env.Committed(time.Now(), ids)
		return nil
	}, nil
}

// Fill implements [Instance], 1,000 messages per statement.
func (l *loopInstance) Fill(ctx context.Context, n int) ([]uuid.UUID, error) {
	all := make([]uuid.UUID, 0, n)
	args := make([]any, 0, 7*1000)
	var ids []uuid.UUID
	for start := 0; start < n; start += 1000 {
		size := min(1000, n-start)
		var err error
		if ids, err = l.commit(ctx, false, loopInsert(l.table, size), size, args, ids); err != nil {
			return nil, err
		}
		all = append(all, ids...)
	}
	_, err := l.env.DB.ExecContext(ctx, `ANALYZE `+l.table)
	return all, err
}

func (l *loopInstance) Start(ctx context.Context) error { return l.drainer.start(ctx) }
func (l *loopInstance) Stop(ctx context.Context) error  { return l.drainer.stop(ctx) }
func (l *loopInstance) Err() error                      { return l.drainer.failed() }

func (l *loopInstance) Backlog(ctx context.Context) (n int64, err error) {
	err = l.env.DB.QueryRowContext(ctx, `SELECT count(*) FROM `+l.table).Scan(&n)
	return n, err
}

// loopDrainer is the hand-written loop's dispatcher: workers goroutines each
// delete up to batch unordered rows in one statement inside a transaction,
// hand them to the sink, and commit; a worker that found nothing sleeps for
// poll. The broker gets the rows before the commit, so a crash sends them
// again and never loses them.
type loopDrainer struct {
	db      *sql.DB
	take    string
	sink    relayer.Transport
	workers int
	poll    time.Duration

	stopping chan struct{}
	wg       sync.WaitGroup
	errMu    sync.Mutex
	err      error
}

func newLoopDrainer(db *sql.DB, table string, sk relayer.Transport, workers, batch int, poll time.Duration) *loopDrainer {
	return &loopDrainer{
		db: db, sink: sk, workers: workers, poll: poll, stopping: make(chan struct{}),
		take: `DELETE FROM ` + table + ` WHERE id = ANY(ARRAY(
    SELECT id FROM ` + table + ` WHERE lane IS NULL ORDER BY id LIMIT ` + strconv.Itoa(batch) + ` FOR UPDATE SKIP LOCKED))
RETURNING id, message_type, transport, destination, body, headers`,
	}
}

// start starts the workers; they run until stop.
func (l *loopDrainer) start(ctx context.Context) error {
	for range l.workers {
		l.wg.Go(func() {
			for {
				select {
				case <-l.stopping:
					return
				default:
				}
				n, err := l.once(ctx)
				if err != nil {
					l.errMu.Lock()
					l.err = errors.Join(l.err, err)
					l.errMu.Unlock()
					return
				}
				if n == 0 {
					select {
					case <-l.stopping:
						return
					case <-time.After(l.poll):
					}
				}
			}
		})
	}
	return nil
}

// failed returns the errors that ended workers so far.
func (l *loopDrainer) failed() error {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	return l.err
}

// stop stops the workers and returns the first error one met.
func (l *loopDrainer) stop(context.Context) error {
	close(l.stopping)
	l.wg.Wait()
	return l.err
}

// once takes, sends and commits one batch, returning its size.
func (l *loopDrainer) once(ctx context.Context) (int, error) {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, l.take)
	if err != nil {
		return 0, err
	}
	var msgs []*relayer.Message
	for rows.Next() {
		m := &relayer.Message{}
		var hdrs []byte
		if err := rows.Scan(&m.ID, &m.Type, &m.Transport, &m.Destination, &m.Body, &hdrs); err != nil {
			rows.Close()
			return 0, err
		}
		if m.Headers, err = headers.Decode(hdrs, nil); err != nil {
			rows.Close()
			return 0, err
		}
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	caps, err := l.sink.Capabilities(ctx, msgs[0].Destination)
	if err != nil {
		return 0, err
	}
	size := max(1, caps.MaxBatchSize)
	for start := 0; start < len(msgs); start += size {
		if err := l.sink.SendBatch(ctx, msgs[start:min(start+size, len(msgs))]); err != nil {
			return 0, err
		}
	}
	return len(msgs), tx.Commit()
}
