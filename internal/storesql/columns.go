package storesql

import (
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/headers"
)

// Columns holds one array literal per stored column of a multi-row write
// (the outbox's insert, a write-back, a burial), in the order of their
// statements' parameters.
type Columns struct {
	ids, types, transports, dests, bodies, hdrs, keys, lanes, created, deliver, parents, states ArrayLiteral
	hbuf                                                                                        []byte
}

// Add appends m's columns, with created as its creation time. It fails only
// for headers that cannot be encoded.
func (c *Columns) Add(m *relayer.Message, created time.Time) error {
	return c.AddRaw(m, created, nil)
}

// AddRaw is Add with the stored header bytes, written as they are instead of
// encoding m.Headers when not nil.
func (c *Columns) AddRaw(m *relayer.Message, created time.Time, rawHeaders []byte) error {
	if rawHeaders != nil {
		c.hbuf = append(c.hbuf[:0], rawHeaders...)
	} else {
		var err error
		if c.hbuf, err = headers.Append(c.hbuf[:0], m.Headers); err != nil {
			return err
		}
	}
	c.ids.UUID(m.ID)
	c.types.Text(m.Type, false)
	c.transports.Text(m.Transport, false)
	c.dests.Text(m.Destination, false)
	c.bodies.Bytea(m.Body)
	c.hdrs.Bytea(c.hbuf)
	c.keys.Text(m.Key, m.Key == "")
	c.lanes.Int(m.Lane, !m.Ordered)
	c.created.Time(created, false)
	c.deliver.Time(m.DeliverAt, m.DeliverAt.IsZero())
	c.parents.Text(m.TraceParent, m.TraceParent == "")
	c.states.Text(m.TraceState, m.TraceState == "")
	return nil
}

// Args returns the columns' literals, in the order Columns names them.
func (c *Columns) Args() []any {
	return []any{c.ids.String(), c.types.String(), c.transports.String(), c.dests.String(), c.bodies.String(), c.hdrs.String(),
		c.keys.String(), c.lanes.String(), c.created.String(), c.deliver.String(), c.parents.String(), c.states.String()}
}

// FailureArrays returns the ids of n failed deliveries, and their errors
// (made storable, see CleanText) and retry times (NULL when zero) as array
// literals; at returns failure i.
func FailureArrays(n int, at func(i int) (id uuid.UUID, err string, retryAt time.Time)) (ids []uuid.UUID, errs, retryAt string) {
	ids = make([]uuid.UUID, n)
	var e, r ArrayLiteral
	for i := range n {
		var msg string
		var t time.Time
		ids[i], msg, t = at(i)
		e.Text(CleanText(msg), false)
		r.Time(t, t.IsZero())
	}
	return ids, e.String(), r.String()
}
