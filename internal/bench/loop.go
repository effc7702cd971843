package bench

import (
	"context"
	"database/sql"
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
	table := r.schema() + `.` + quoteIdent(outbox.TablePrefix+"outbox")
	return &loopProducer{
		insertBusiness: `INSERT INTO ` + r.orders(outbox) + ` (note) VALUES ($1)`,
		insertMessages: loopInsert(table, perTx),
		destination:    r.cfg.Destination,
		body:           newPayload(r.cfg.BodySize, 0, false).(event).body,
		hdrs:           hdrs,
	}, nil
}

// commit runs one business transaction with n messages.
func (l *loopProducer) commit(ctx context.Context, db *sql.DB, n int, args []any) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, l.insertBusiness, "order"); err != nil {
		return err
	}
	if n > 0 {
		now := time.Now()
		args = args[:0]
		for range n {
			id, err := uuid.NewV7()
			if err != nil {
				return err
			}
			args = append(args, id, eventType, "bench", l.destination, l.body, l.hdrs, now)
		}
		if _, err := tx.ExecContext(ctx, l.insertMessages, args...); err != nil {
			return err
		}
	}
	return tx.Commit()
}
