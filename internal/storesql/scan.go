package storesql

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
)

// RowColumns is the column list every row-returning statement selects, in
// the order [Scratch.Scan] reads.
const RowColumns = `id, message_type, transport, destination, body, headers, ordering_key, lane,
    created_at, deliver_at, attempts, last_error, trace_parent, trace_state, claimed_until, retry_at`

// Fields are where [Scratch.Scan] puts one stored row: its message and its
// delivery bookkeeping (the fields of store.Row).
type Fields struct {
	Message      *relayer.Message
	Attempts     *int
	ClaimedUntil *time.Time
	LastError    *string
	RetryAt      *time.Time
}

// Scanner is the current row of a result: *sql.Rows, or pgx's rows where a
// store runs statements on pgx directly.
type Scanner interface {
	Scan(dest ...any) error
}

// Scratch is what scanning a batch of rows reuses from row to row: the
// destinations of the nullable and raw columns (whose addresses, passed to
// Scan, would otherwise move to the heap for every row), the destination list,
// and an arena that holds the bodies of many rows in one allocation.
type Scratch struct {
	rawBody, rawHeaders     sql.RawBytes
	key, lastErr            sql.NullString
	traceParent, traceSt    sql.NullString
	lane                    sql.NullInt32
	deliverAt, claimedUntil sql.NullTime
	retryAt                 sql.NullTime
	// The destinations of lent rows (see Lent): pgx decodes into its own
	// types with its binary plans, where database/sql's Null types and a
	// uuid.UUID cost a Scan method call, reflection and an allocation a
	// column.
	lentID                                pgtype.UUID
	lentKey, lentLastErr                  pgtype.Text
	lentTraceParent, lentTraceSt          pgtype.Text
	lentLane                              pgtype.Int4
	lentDeliverAt, lentClaimed, lentRetry pgtype.Timestamptz
	dest                                  []any
	arena                                 []byte
	// FreshBytes: the driver's bytes are the row's own (see [FreshBytes]),
	// so that Keep need not copy a large body.
	FreshBytes bool
	// Lent: the rows are pgx's own, which can lend a row's body and headers
	// until the next row instead of copying them (Keep copies them once).
	Lent bool
}

// arenaChunk is the size of the blocks row bodies are copied into, and
// arenaFirst that of a read's first block, which doubles up to arenaChunk as
// the read goes on: most reads of a steady stream return a few rows, and a
// whole chunk for each, cleared before use, cost more than their rows.
const (
	arenaChunk = 64 << 10
	arenaFirst = 4 << 10
)

// Keep copies b into the arena and returns the copy, its capacity clipped so
// that appending to it never overwrites the next row's bytes.
func (sc *Scratch) Keep(b []byte) []byte {
	if len(b) == 0 {
		return []byte{} // an empty body is a body, not a missing one
	}
	if len(b) > arenaChunk/4 {
		if sc.FreshBytes {
			return b[:len(b):len(b)]
		}
		return bytes.Clone(b)
	}
	if cap(sc.arena)-len(sc.arena) < len(b) {
		sc.arena = make([]byte, 0, min(arenaChunk, max(arenaFirst, 2*cap(sc.arena), len(b))))
	}
	start := len(sc.arena)
	sc.arena = append(sc.arena, b...)
	return sc.arena[start:len(sc.arena):len(sc.arena)]
}

// RawHeaders returns the stored header bytes of the row Scan read last,
// valid until the next row: what a row whose headers do not decode is
// written back with.
func (sc *Scratch) RawHeaders() []byte { return sc.rawHeaders }

// Scan reads the RowColumns of the current row into f, and any columns
// after them into extra. A row whose stored headers do not decode is read
// all the same, with nil headers, and the decoding error returned as
// badHeaders; err reports a row that could not be read at all.
func (sc *Scratch) Scan(rows Scanner, f Fields, extra ...any) (badHeaders, err error) {
	m := f.Message
	if sc.Lent {
		sc.dest = append(sc.dest[:0], &sc.lentID, &m.Type, &m.Transport, &m.Destination,
			(*pgtype.DriverBytes)(&sc.rawBody), (*pgtype.DriverBytes)(&sc.rawHeaders),
			&sc.lentKey, &sc.lentLane, &m.CreatedAt, &sc.lentDeliverAt, f.Attempts, &sc.lentLastErr,
			&sc.lentTraceParent, &sc.lentTraceSt, &sc.lentClaimed, &sc.lentRetry)
	} else {
		sc.dest = append(sc.dest[:0], &m.ID, &m.Type, &m.Transport, &m.Destination, &sc.rawBody, &sc.rawHeaders,
			&sc.key, &sc.lane, &m.CreatedAt, &sc.deliverAt, f.Attempts, &sc.lastErr, &sc.traceParent, &sc.traceSt, &sc.claimedUntil, &sc.retryAt)
	}
	sc.dest = append(sc.dest, extra...)
	if err := rows.Scan(sc.dest...); err != nil {
		return nil, err
	}
	if sc.Lent {
		if err := sc.fromLent(m); err != nil {
			return nil, err
		}
	}
	m.Body = sc.Keep(sc.rawBody)
	hs, err := headers.Decode(sc.rawHeaders, nil)
	if err != nil {
		m.Headers = nil
		sc.fill(f)
		return err, nil
	}
	if len(hs) > 0 {
		// Decoded values alias their input, and raw bytes are only valid
		// until the next row: decode a copy that stays.
		if hs, err = headers.Decode(sc.Keep(sc.rawHeaders), hs[:0]); err != nil {
			return err, nil
		}
	}
	m.Headers = hs
	sc.fill(f)
	return nil, nil
}

// fromLent moves what a lent row was scanned into (see Lent) where Scan
// reads a database/sql row into.
func (sc *Scratch) fromLent(m *relayer.Message) error {
	m.ID = sc.lentID.Bytes
	sc.key = sql.NullString{String: sc.lentKey.String, Valid: sc.lentKey.Valid}
	sc.lastErr = sql.NullString{String: sc.lentLastErr.String, Valid: sc.lentLastErr.Valid}
	sc.traceParent = sql.NullString{String: sc.lentTraceParent.String, Valid: sc.lentTraceParent.Valid}
	sc.traceSt = sql.NullString{String: sc.lentTraceSt.String, Valid: sc.lentTraceSt.Valid}
	sc.lane = sql.NullInt32{Int32: sc.lentLane.Int32, Valid: sc.lentLane.Valid}
	var err [3]error
	sc.deliverAt, err[0] = LentTime("deliver_at", sc.lentDeliverAt)
	sc.claimedUntil, err[1] = LentTime("claimed_until", sc.lentClaimed)
	sc.retryAt, err[2] = LentTime("retry_at", sc.lentRetry)
	return errors.Join(err[:]...)
}

// LentTime returns a timestamptz column scanned from a lent row as
// database/sql's nullable time, and refuses an infinite one, which no
// statement of ours stores and which a time.Time cannot hold, as
// database/sql's scan does.
func LentTime(column string, t pgtype.Timestamptz) (sql.NullTime, error) {
	if t.Valid && t.InfinityModifier != pgtype.Finite {
		return sql.NullTime{}, fmt.Errorf("column %s: an infinite timestamp cannot be read into a time.Time", column)
	}
	return sql.NullTime{Time: t.Time, Valid: t.Valid}, nil
}

// fill sets f's fields from the scanned nullable columns.
func (sc *Scratch) fill(f Fields) {
	m := f.Message
	m.Key = sc.key.String
	m.Ordered = sc.lane.Valid
	m.Lane = int(sc.lane.Int32)
	m.CreatedAt = m.CreatedAt.UTC()
	m.DeliverAt = time.Time{}
	if sc.deliverAt.Valid {
		m.DeliverAt = sc.deliverAt.Time.UTC()
	}
	*f.LastError = sc.lastErr.String
	*f.ClaimedUntil = time.Time{}
	if sc.claimedUntil.Valid {
		*f.ClaimedUntil = sc.claimedUntil.Time.UTC()
	}
	*f.RetryAt = time.Time{}
	if sc.retryAt.Valid {
		*f.RetryAt = sc.retryAt.Time.UTC()
	}
	m.TraceParent = sc.traceParent.String
	m.TraceState = sc.traceSt.String
}
