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
)

// The hand-written loop: what a service would write without a library, and
// so the database's own limit for the same rows. Its producer inserts the
// business row and a multi-row INSERT of the messages in one transaction,
// with the same ids, bodies, header bytes and columns Relayer stores.

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

// loopProducer writes perTx messages per transaction the hand-written way.
type loopProducer struct {
	insertBusiness, insertMessages string
	destination                    string
	body, hdrs                     []byte
	once                           sync.Once
}

func newLoopProducer(r *runner, outbox relayer.Outbox, perTx int) (*loopProducer, error) {
	hdrs, err := headers.Encode([]headers.Header{
		{Name: relayer.HeaderContentType, Value: []byte("application/octet-stream")},
		{Name: "bench-producer", Value: []byte("0")},
		{Name: "bench-run", Value: []byte(r.cfg.Schema)},
		{Name: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
	})
	if err != nil {
		return nil, err
	}
	table := r.table(outbox, "outbox")
	return &loopProducer{
		insertBusiness: `INSERT INTO ` + r.orders(outbox) + ` (note) VALUES ($1)`,
		insertMessages: loopInsert(table, perTx),
		destination:    r.cfg.Destination,
		body:           newPayload(r.cfg.BodySize, 0, false).(event).body,
		hdrs:           hdrs,
	}, nil
}

// commit runs one business transaction with n messages, their parameters
// built in args, and returns their ids in ids[:0].
func (l *loopProducer) commit(ctx context.Context, db *sql.DB, n int, args []any, ids []uuid.UUID) ([]uuid.UUID, error) {
	ids = ids[:0]
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return ids, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, l.insertBusiness, "order"); err != nil {
		return ids, err
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
			args = append(args, id, eventType, "bench", l.destination, l.body, l.hdrs, now)
		}
		if _, err := tx.ExecContext(ctx, l.insertMessages, args...); err != nil {
			return ids, err
		}
	}
	return ids, tx.Commit()
}

// commits makes producers for runner.produce that commit perTx messages per
// transaction and, when record is set, note each commit in it.
func (l *loopProducer) commits(db *sql.DB, perTx int, record *stamper) func(int) func(context.Context) error {
	return func(int) func(context.Context) error {
		args := make([]any, 0, 7*perTx)
		var ids []uuid.UUID
		return func(ctx context.Context) error {
			var err error
			if ids, err = l.commit(ctx, db, perTx, args, ids); err != nil || record == nil {
				return err
			}
			now := time.Now()
			record.mu.Lock()
			for _, id := range ids {
				record.commits = append(record.commits, committed{id: id, at: now})
			}
			record.mu.Unlock()
			return nil
		}
	}
}

// loopDrainer is the hand-written loop's dispatcher: workers goroutines each
// delete up to batch unordered rows in one statement inside a transaction,
// hand them to the sink, and commit; a worker that found nothing sleeps for
// poll. The broker gets the rows before the commit, so a crash sends them
// again and never loses them.
type loopDrainer struct {
	db      *sql.DB
	take    string
	sink    *sink
	workers int
	poll    time.Duration

	stopping chan struct{}
	wg       sync.WaitGroup
	errMu    sync.Mutex
	err      error
}

func (r *runner) newLoopDrainer(outbox relayer.Outbox, sk *sink, workers, batch int, poll time.Duration) *loopDrainer {
	table := r.table(outbox, "outbox")
	return &loopDrainer{
		db: r.cfg.DB, sink: sk, workers: workers, poll: poll, stopping: make(chan struct{}),
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
