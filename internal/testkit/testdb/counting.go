package testdb

import (
	"context"
	"database/sql"
	"net"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// OpenCounting opens the test database with pgx's database/sql driver on
// connections that count their writes to the server. pgx flushes once per
// round trip, so the count is the number of round trips, which benchmarks
// report per operation. The pool is closed when the test ends.
func OpenCounting(tb testing.TB) (*sql.DB, *atomic.Int64) {
	tb.Helper()
	cfg, err := pgx.ParseConfig(URL(tb))
	if err != nil {
		tb.Fatalf("testdb: %v", err)
	}
	writes := new(atomic.Int64)
	cfg.DialFunc = CountingDial(writes)
	db := stdlib.OpenDB(*cfg)
	tb.Cleanup(func() { db.Close() })
	return db, writes
}

// CountingDial returns a pgx dial function whose connections add their
// writes to the server to writes: one per round trip, since pgx flushes
// once per round trip.
func CountingDial(writes *atomic.Int64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	dialer := &net.Dialer{}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: writes}, nil
	}
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}
