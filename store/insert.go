package store

import (
	"context"
	"database/sql"
	"fmt"
	"math/bits"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
)

// Insert writes msgs in one statement, one round trip whatever their number. Run
// it on the business transaction (see [Store.With]) so that the messages commit or
// roll back with the business rows. It validates every message first and writes
// nothing when one is invalid; the error wraps [ErrInvalidMessage] and names the
// message and field. A zero CreatedAt is set to the current time.
func (s *Store) Insert(ctx context.Context, msgs []relayer.Message) error {
	return s.InsertWith(ctx, s.exec, msgs)
}

// ExecFunc runs one statement with its arguments and reports whether it
// succeeded. Adapters of drivers that are not database/sql drivers, such as
// pgx's native interface, run the store's statements through one.
type ExecFunc func(ctx context.Context, query string, args ...any) error

func (s *Store) exec(ctx context.Context, query string, args ...any) error {
	_, err := s.db.ExecContext(ctx, query, args...)
	return err
}

// InsertWith is [Store.Insert] with the statement run by exec instead of the
// store's handle: the same statement, arguments and checks. Run exec on the
// business transaction. The arguments are strings, byte slices, time.Time
// values in UTC and database/sql's Null types.
func (s *Store) InsertWith(ctx context.Context, exec ExecFunc, msgs []relayer.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if len(msgs) <= insertValuesMax {
		return s.insertValues(ctx, exec, msgs)
	}
	var cols columnArrays
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
		if err := cols.add(m, created); err != nil {
			return fmt.Errorf("%w: message %d (id %s): headers: %w", ErrInvalidMessage, i, m.ID, err)
		}
	}
	return wrap(ctx, "insert", exec(ctx, s.q.insert, cols.args()...))
}

// columnArrays holds one array literal per stored column of a multi-row
// insert, in the order of the insert statements' parameters.
type columnArrays struct {
	ids, types, transports, dests, bodies, hdrs, keys, lanes, created, deliver, parents, states arrayLiteral
	hbuf                                                                                        []byte
}

// add appends m's columns, with created as its creation time. It fails only
// for headers that cannot be encoded.
func (c *columnArrays) add(m *relayer.Message, created time.Time) error {
	return c.addRaw(m, created, nil)
}

// addRaw is add with the stored header bytes, written as they are instead of
// encoding m.Headers when not nil.
func (c *columnArrays) addRaw(m *relayer.Message, created time.Time, rawHeaders []byte) error {
	if rawHeaders != nil {
		c.hbuf = append(c.hbuf[:0], rawHeaders...)
	} else {
		var err error
		if c.hbuf, err = headers.Append(c.hbuf[:0], m.Headers); err != nil {
			return err
		}
	}
	c.ids.uuid(m.ID)
	c.types.text(m.Type, false)
	c.transports.text(m.Transport, false)
	c.dests.text(m.Destination, false)
	c.bodies.bytea(m.Body)
	c.hdrs.bytea(c.hbuf)
	c.keys.text(m.Key, m.Key == "")
	c.lanes.int(m.Lane, !m.Ordered)
	c.created.time(created, false)
	c.deliver.time(m.DeliverAt, m.DeliverAt.IsZero())
	c.parents.text(m.TraceParent, m.TraceParent == "")
	c.states.text(m.TraceState, m.TraceState == "")
	return nil
}

func (c *columnArrays) args() []any {
	return []any{c.ids.String(), c.types.String(), c.transports.String(), c.dests.String(), c.bodies.String(), c.hdrs.String(),
		c.keys.String(), c.lanes.String(), c.created.String(), c.deliver.String(), c.parents.String(), c.states.String()}
}

// insertValues writes up to insertValuesMax messages with one VALUES list of
// plain parameters, leaving out the optional columns no message has.
func (s *Store) insertValues(ctx context.Context, exec ExecFunc, msgs []relayer.Message) error {
	mask := 0
	for i := range msgs {
		m := &msgs[i]
		if err := validateMessage(m); err != nil {
			return fmt.Errorf("%w: message %d (id %s): %w", ErrInvalidMessage, i, m.ID, err)
		}
		if m.Key != "" {
			mask |= colKey
		}
		if m.Ordered {
			mask |= colLane
		}
		if !m.DeliverAt.IsZero() {
			mask |= colDeliver
		}
		if m.TraceParent != "" {
			mask |= colParent
		}
		if m.TraceState != "" {
			mask |= colState
		}
	}
	args := make([]any, 0, len(msgs)*(insertRequired+bits.OnesCount(uint(mask))))
	now := time.Now()
	var hbuf []byte
	for i := range msgs {
		m := &msgs[i]
		start := len(hbuf)
		var err error
		if hbuf, err = headers.Append(hbuf, m.Headers); err != nil {
			return fmt.Errorf("%w: message %d (id %s): headers: %w", ErrInvalidMessage, i, m.ID, err)
		}
		created := m.CreatedAt
		if created.IsZero() {
			created = now
		}
		body := m.Body
		if body == nil {
			body = []byte{} // NULL would violate NOT NULL; an empty body is a body
		}
		// The id goes as text: pgx, given a uuid.UUID (a driver.Valuer),
		// first tries and fails to encode it binary, building an error each
		// time (15% of the client's time at 100 rows); lib/pq takes no
		// [16]byte.
		args = append(args, m.ID.String(), m.Type, m.Transport, m.Destination, body, hbuf[start:len(hbuf):len(hbuf)], pgTime(created))
		if mask&colKey != 0 {
			args = append(args, sql.NullString{String: m.Key, Valid: m.Key != ""})
		}
		if mask&colLane != 0 {
			args = append(args, sql.NullInt32{Int32: int32(m.Lane), Valid: m.Ordered})
		}
		if mask&colDeliver != 0 {
			args = append(args, sql.NullTime{Time: pgTime(m.DeliverAt), Valid: !m.DeliverAt.IsZero()})
		}
		if mask&colParent != 0 {
			args = append(args, sql.NullString{String: m.TraceParent, Valid: m.TraceParent != ""})
		}
		if mask&colState != 0 {
			args = append(args, sql.NullString{String: m.TraceState, Valid: m.TraceState != ""})
		}
	}
	return wrap(ctx, "insert", exec(ctx, s.q.insertValues.get(len(msgs), mask), args...))
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
