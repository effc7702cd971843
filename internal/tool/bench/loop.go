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
	if _, err := store.Migrate(ctx, env.DB, store.TablesOf(outbox)); err != nil {
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
	return produce(l.env, loopInsert(l.table, perTx), 7, perTx, l.commit), nil
}

// Fill implements [Instance], 1,000 messages per statement.
func (l *loopInstance) Fill(ctx context.Context, n int) ([]uuid.UUID, error) {
	return fill(ctx, l.env, l.table, func(n int) string { return loopInsert(l.table, n) }, 7, n, l.commit)
}

// committer commits one transaction: the business row when business is
// set, then n messages with insert and args (reused); it returns their ids
// in ids[:0].
type committer func(ctx context.Context, business bool, insert string, n int, args []any, ids []uuid.UUID) ([]uuid.UUID, error)

// produce returns a producer of perTx messages per transaction, committed
// by commit with insert, whose messages take argsPer arguments each.
func produce(env Env, insert string, argsPer, perTx int, commit committer) func(context.Context) error {
	args := make([]any, 0, argsPer*perTx)
	var ids []uuid.UUID
	return func(ctx context.Context) error {
		var err error
		if ids, err = commit(ctx, true, insert, perTx, args, ids); err != nil || env.Committed == nil {
			return err
		}
		env.Committed(time.Now(), ids)
		return nil
	}
}

// fill commits n messages without business rows, 1,000 per statement, and
// analyzes table.
func fill(ctx context.Context, env Env, table string, insert func(n int) string, argsPer, n int, commit committer) ([]uuid.UUID, error) {
	all := make([]uuid.UUID, 0, n)
	args := make([]any, 0, argsPer*1000)
	var ids []uuid.UUID
	for start := 0; start < n; start += 1000 {
		size := min(1000, n-start)
		var err error
		if ids, err = commit(ctx, false, insert(size), size, args, ids); err != nil {
			return nil, err
		}
		all = append(all, ids...)
	}
	_, err := env.DB.ExecContext(ctx, `ANALYZE `+table)
	return all, err
}

func (l *loopInstance) Start(ctx context.Context) error { return l.drainer.start(ctx) }
func (l *loopInstance) Stop(ctx context.Context) error  { return l.drainer.stop(ctx) }
func (l *loopInstance) Err() error                      { return l.drainer.failed() }

func (l *loopInstance) Backlog(ctx context.Context) (n int64, err error) {
	err = l.env.DB.QueryRowContext(ctx, `SELECT count(*) FROM `+l.table).Scan(&n)
	return n, err
}

// drainer runs a loop's workers: each calls once (with its number) until
// it finds nothing, then sleeps for poll; an error ends the worker.
type drainer struct {
	once    func(ctx context.Context, worker int) (int, error)
	workers int
	poll    time.Duration

	stopping chan struct{}
	wg       sync.WaitGroup
	errMu    sync.Mutex
	err      error
}

func newDrainer(workers int, poll time.Duration, once func(ctx context.Context, worker int) (int, error)) *drainer {
	return &drainer{once: once, workers: workers, poll: poll, stopping: make(chan struct{})}
}

// start starts the workers; they run until stop.
func (d *drainer) start(ctx context.Context) error {
	for w := range d.workers {
		d.wg.Go(func() {
			for {
				select {
				case <-d.stopping:
					return
				default:
				}
				n, err := d.once(ctx, w)
				if err != nil {
					d.errMu.Lock()
					d.err = errors.Join(d.err, err)
					d.errMu.Unlock()
					return
				}
				if n == 0 {
					select {
					case <-d.stopping:
						return
					case <-time.After(d.poll):
					}
				}
			}
		})
	}
	return nil
}

// failed returns the errors that ended workers so far.
func (d *drainer) failed() error {
	d.errMu.Lock()
	defer d.errMu.Unlock()
	return d.err
}

// stop stops the workers and returns the errors they met.
func (d *drainer) stop(context.Context) error {
	close(d.stopping)
	d.wg.Wait()
	return d.failed()
}

// loopDrainer is the hand-written loop's dispatcher: workers goroutines each
// delete up to batch unordered rows in one statement inside a transaction,
// hand them to the sink, and commit; a worker that found nothing sleeps for
// poll. The broker gets the rows before the commit, so a crash sends them
// again and never loses them.
type loopDrainer struct {
	*drainer
	db   *sql.DB
	take string
	sink relayer.Transport
}

func newLoopDrainer(db *sql.DB, table string, sk relayer.Transport, workers, batch int, poll time.Duration) *loopDrainer {
	l := &loopDrainer{
		db: db, sink: sk,
		take: `DELETE FROM ` + table + ` WHERE id = ANY(ARRAY(
    SELECT id FROM ` + table + ` WHERE lane IS NULL ORDER BY id LIMIT ` + strconv.Itoa(batch) + ` FOR UPDATE SKIP LOCKED))
RETURNING id, message_type, transport, destination, body, headers`,
	}
	l.drainer = newDrainer(workers, poll, func(ctx context.Context, _ int) (int, error) { return l.once(ctx) })
	return l
}

// sendAll sends msgs, all to one destination, in batches of the sink's
// size.
func sendAll(ctx context.Context, sink relayer.Transport, msgs []*relayer.Message) error {
	caps, err := sink.Capabilities(ctx, msgs[0].Destination)
	if err != nil {
		return err
	}
	size := max(1, caps.MaxBatchSize)
	for start := 0; start < len(msgs); start += size {
		if err := sink.SendBatch(ctx, msgs[start:min(start+size, len(msgs))]); err != nil {
			return err
		}
	}
	return nil
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
	if err := sendAll(ctx, l.sink, msgs); err != nil {
		return 0, err
	}
	return len(msgs), tx.Commit()
}
