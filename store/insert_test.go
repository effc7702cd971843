package store

import (
	"testing"
	"time"

	"github.com/relayer-go/relayer"
)

// TestInsertStatementSendsSharedColumnsOnce checks the VALUES statement of
// a shape: each shared column has one parameter, numbered first, which every
// row's tuple names; every other column has one parameter a row.
func TestInsertStatementSendsSharedColumnsOnce(t *testing.T) {
	t.Parallel()
	st := insertValues("o")
	for _, tc := range []struct {
		sh     insertShape
		want   string
		params int
	}{{
		sh:     insertShape{rows: 1, sent: insertRequired},
		want:   `INSERT INTO o (id, message_type, transport, destination, body, headers, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		params: 7,
	}, {
		sh: insertShape{rows: 2, sent: insertRequired | 1<<icKey,
			shared: 1<<icType | 1<<icTransport | 1<<icDestination | 1<<icCreated},
		want: `INSERT INTO o (id, message_type, transport, destination, body, headers, created_at, ordering_key) ` +
			`VALUES ($5, $1, $2, $3, $6, $7, $4, $8), ($9, $1, $2, $3, $10, $11, $4, $12)`,
		params: 12,
	}, {
		sh:     insertShape{rows: 2, sent: insertRequired | 1<<icLane | 1<<icState, shared: 1<<icState | 1<<icLane},
		want:   `INSERT INTO o (id, message_type, transport, destination, body, headers, created_at, lane, trace_state) VALUES ($3, $4, $5, $6, $7, $8, $9, $1, $2), ($10, $11, $12, $13, $14, $15, $16, $1, $2)`,
		params: 16,
	}} {
		if got := st.get(tc.sh); got != tc.want {
			t.Errorf("shape %+v:\n got %s\nwant %s", tc.sh, got, tc.want)
		}
		if got := tc.sh.params(); got != tc.params {
			t.Errorf("shape %+v takes %d parameters, want %d", tc.sh, got, tc.params)
		}
	}
}

// TestDifferingColumns checks which columns two messages cannot share.
func TestDifferingColumns(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	a := relayer.Message{Type: "t", Transport: "nats", Destination: "d", Key: "k", TraceParent: "p"}
	if d := differing(&a, &a, t0, t0); d != 0 {
		t.Errorf("a message differs from itself in %b", d)
	}
	b := a
	b.Destination, b.Ordered, b.DeliverAt = "e", true, t0
	want := uint16(1<<icDestination | 1<<icLane | 1<<icDeliver | 1<<icCreated)
	if d := differing(&a, &b, t0, t0.Add(time.Microsecond)); d != want {
		t.Errorf("differing = %b, want %b", d, want)
	}
	// Two unordered messages share a NULL lane whatever their Lane field.
	c := a
	c.Lane = 3
	if d := differing(&a, &c, t0, t0); d != 0 {
		t.Errorf("unordered messages differ in %b", d)
	}
}
