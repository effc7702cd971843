package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/storesql"
	"github.com/relayer-go/relayer/internal/storewrite"
)

// Insert writes msgs in one statement, one round trip whatever their number. Run
// it on the business transaction (see [Store.With]) so that the messages commit or
// roll back with the business rows. It validates every message first and writes
// nothing when one is invalid; the error wraps [ErrInvalidMessage] and names the
// message and field. A zero CreatedAt is set to the current time.
func (s *Store) Insert(ctx context.Context, msgs []relayer.Message) error {
	return s.insertWith(ctx, s.exec, msgs)
}

// execFunc runs one statement with its arguments and reports whether it
// succeeded: the store's handle, or a writer's transaction of any driver
// (internal/storewrite).
type execFunc = storewrite.ExecFunc

func (s *Store) exec(ctx context.Context, query string, args ...any) error {
	_, err := s.db.ExecContext(ctx, query, args...)
	return err
}

// insertWith is [Store.Insert] with the statement run by exec instead of the
// store's handle: the same statement, arguments and checks. The arguments
// are strings, byte slices, time.Time values in UTC and database/sql's Null
// types.
func (s *Store) insertWith(ctx context.Context, exec execFunc, msgs []relayer.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if len(msgs) <= insertValuesMax {
		return s.insertValues(ctx, exec, msgs)
	}
	var cols storesql.Columns
	now := time.Now()
	for i := range msgs {
		m := &msgs[i]
		if err := validateMessage(m); err != nil {
			return fmt.Errorf("%w: message %d (id %s): %w", ErrInvalidMessage, i, m.ID, err)
		}
		created := m.CreatedAt
		if created.IsZero() {
			created = now
		}
		if err := cols.Add(m, created); err != nil {
			return fmt.Errorf("%w: message %d (id %s): headers: %w", ErrInvalidMessage, i, m.ID, err)
		}
	}
	return wrap(ctx, "insert", exec(ctx, s.q.insert, cols.Args()...))
}

// insertValues writes up to insertValuesMax messages with one VALUES list of
// plain parameters, leaving out the optional columns no message has and
// sending once the columns every message holds one value of (typically the
// type, route and creation time of a PublishAll, and its trace context).
func (s *Store) insertValues(ctx context.Context, exec execFunc, msgs []relayer.Message) error {
	sh := insertShape{rows: len(msgs), sent: insertRequired, shared: insertShareable}
	now := time.Now()
	first := &msgs[0]
	firstCreated := createdOr(first, now)
	for i := range msgs {
		m := &msgs[i]
		if err := validateMessage(m); err != nil {
			return fmt.Errorf("%w: message %d (id %s): %w", ErrInvalidMessage, i, m.ID, err)
		}
		sh.sent |= optionalSent(m)
		if i > 0 {
			sh.shared &^= differing(first, m, firstCreated, createdOr(m, now))
		}
	}
	if len(msgs) == 1 {
		sh.shared = 0
	}
	sh.shared &= sh.sent
	args := make([]any, 0, sh.params())
	for c := range insertColumns {
		if sh.shared&(1<<c) != 0 {
			args = append(args, insertArg(c, first, firstCreated, nil))
		}
	}
	own := sh.sent &^ sh.shared
	var hbuf []byte
	for i := range msgs {
		m := &msgs[i]
		start := len(hbuf)
		var err error
		if hbuf, err = headers.Append(hbuf, m.Headers); err != nil {
			return fmt.Errorf("%w: message %d (id %s): headers: %w", ErrInvalidMessage, i, m.ID, err)
		}
		created := createdOr(m, now)
		for c := range insertColumns {
			if own&(1<<c) != 0 {
				args = append(args, insertArg(c, m, created, hbuf[start:len(hbuf):len(hbuf)]))
			}
		}
	}
	return wrap(ctx, "insert", exec(ctx, s.q.insertValues.get(sh), args...))
}

// createdOr returns m's creation time, or now when it has none.
func createdOr(m *relayer.Message, now time.Time) time.Time {
	if m.CreatedAt.IsZero() {
		return now
	}
	return m.CreatedAt
}

// optionalSent returns the optional columns m has a value for.
func optionalSent(m *relayer.Message) uint16 {
	var sent uint16
	if m.Key != "" {
		sent |= 1 << icKey
	}
	if m.Ordered {
		sent |= 1 << icLane
	}
	if !m.DeliverAt.IsZero() {
		sent |= 1 << icDeliver
	}
	if m.TraceParent != "" {
		sent |= 1 << icParent
	}
	if m.TraceState != "" {
		sent |= 1 << icState
	}
	return sent
}

// differing returns the shareable columns whose values differ between a
// and b, created at aCreated and bCreated.
func differing(a, b *relayer.Message, aCreated, bCreated time.Time) uint16 {
	var d uint16
	for _, f := range [...]struct {
		col  int
		diff bool
	}{
		{icType, a.Type != b.Type},
		{icTransport, a.Transport != b.Transport},
		{icDestination, a.Destination != b.Destination},
		{icCreated, !aCreated.Equal(bCreated)},
		{icKey, a.Key != b.Key},
		{icLane, a.Ordered != b.Ordered || a.Ordered && a.Lane != b.Lane},
		{icDeliver, !a.DeliverAt.Equal(b.DeliverAt)},
		{icParent, a.TraceParent != b.TraceParent},
		{icState, a.TraceState != b.TraceState},
	} {
		if f.diff {
			d |= 1 << f.col
		}
	}
	return d
}

// insertArg returns m's value of column c, created at created and with the
// stored header bytes hdr.
func insertArg(c int, m *relayer.Message, created time.Time, hdr []byte) any {
	switch c {
	case icID:
		// The id goes as text: pgx, given a uuid.UUID (a driver.Valuer),
		// first tries and fails to encode it binary, building an error each
		// time (15% of the client's time at 100 rows); lib/pq takes no
		// [16]byte.
		return m.ID.String()
	case icType:
		return m.Type
	case icTransport:
		return m.Transport
	case icDestination:
		return m.Destination
	case icBody:
		if m.Body == nil {
			return []byte{} // NULL would violate NOT NULL; an empty body is a body
		}
		return m.Body
	case icHeaders:
		return hdr
	case icCreated:
		return pgTime(created)
	case icKey:
		return sql.NullString{String: m.Key, Valid: m.Key != ""}
	case icLane:
		return sql.NullInt32{Int32: int32(m.Lane), Valid: m.Ordered}
	case icDeliver:
		return sql.NullTime{Time: pgTime(m.DeliverAt), Valid: !m.DeliverAt.IsZero()}
	case icParent:
		return sql.NullString{String: m.TraceParent, Valid: m.TraceParent != ""}
	default: // icState
		return sql.NullString{String: m.TraceState, Valid: m.TraceState != ""}
	}
}

// Validate checks msgs as [Store.Insert] does, writing nothing: it returns
// the error Insert would return for the first invalid message, wrapping
// [ErrInvalidMessage], or nil.
func Validate(msgs []relayer.Message) error {
	for i := range msgs {
		if err := validateMessage(&msgs[i]); err != nil {
			return fmt.Errorf("%w: message %d (id %s): %w", ErrInvalidMessage, i, msgs[i].ID, err)
		}
		if _, err := headers.Append(nil, msgs[i].Headers); err != nil {
			return fmt.Errorf("%w: message %d (id %s): headers: %w", ErrInvalidMessage, i, msgs[i].ID, err)
		}
	}
	return nil
}

func validateMessage(m *relayer.Message) error {
	if m.ID == uuid.Nil {
		return fmt.Errorf("ID is the zero UUID")
	}
	for _, f := range []struct{ name, value string }{
		{"Type", m.Type}, {"Transport", m.Transport}, {"Destination", m.Destination},
	} {
		if f.value == "" {
			return fmt.Errorf("%s is empty", f.name)
		}
	}
	for _, f := range []struct{ name, value string }{
		{"Type", m.Type}, {"Transport", m.Transport}, {"Destination", m.Destination},
		{"Key", m.Key}, {"TraceParent", m.TraceParent}, {"TraceState", m.TraceState},
	} {
		if !utf8.ValidString(f.value) {
			return fmt.Errorf("%s is not valid UTF-8", f.name)
		}
		if strings.IndexByte(f.value, 0) >= 0 {
			return fmt.Errorf("%s contains a NUL byte", f.name)
		}
	}
	if err := OverLimit(m); err != nil {
		return err
	}
	if m.Ordered {
		if m.Key == "" {
			return fmt.Errorf("ordered message has no Key")
		}
		if m.Lane < 0 || m.Lane >= relayer.LanesMax {
			return fmt.Errorf("Lane %d is outside 0 to %d", m.Lane, relayer.LanesMax-1)
		}
	}
	return nil
}

// OverLimit reports an ordering key longer than relayer.KeyMaxBytes, or a
// transport name or destination longer than relayer.EndpointMaxBytes: the
// outbox indexes them when a send fails, and PostgreSQL refuses index
// entries over 2,704 bytes. Inserts refuse such messages; workers that meet
// such a stored row (written before the limits, or by hand) move it to the
// dead letters when its send fails ([ReasonOverLimit]), since its failure
// cannot be recorded. It returns nil for a message within the limits.
func OverLimit(m *relayer.Message) error {
	for _, f := range []struct {
		name  string
		value string
		limit int
	}{
		{"Key", m.Key, relayer.KeyMaxBytes}, {"Transport", m.Transport, relayer.EndpointMaxBytes}, {"Destination", m.Destination, relayer.EndpointMaxBytes},
	} {
		if len(f.value) > f.limit {
			return fmt.Errorf("%s is %d bytes, over the limit of %d", f.name, len(f.value), f.limit)
		}
	}
	return nil
}
