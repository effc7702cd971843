package consume

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/relayer-go/relayer"
)

// sqlStateError is an error as lib/pq reports a server's: a SQLSTATE
// behind a SQLState method.
type sqlStateError string

func (e sqlStateError) Error() string    { return "pq: " + string(e) }
func (e sqlStateError) SQLState() string { return string(e) }

func TestClassify(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("store: record inbox: %w", &pgconn.PgError{Code: code}) }
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		name        string
		err         error
		fromHandler bool
		want        faultKind
	}{
		{"connection refused at begin", refused, false, fault},
		{"connection refused in the handler", refused, true, maybeFault},
		{"bad connection", driver.ErrBadConn, false, fault},
		{"unexpected EOF", io.ErrUnexpectedEOF, false, fault},
		{"admin shutdown", pg("57P01"), true, fault},
		{"cannot connect now", pg("57P03"), false, fault},
		{"too many connections", pg("53300"), false, fault},
		{"connection failure", pg("08006"), false, fault},
		{"undefined table", pg("42P01"), false, fault},
		{"missing schema", pg("3F000"), false, fault},
		{"insufficient privilege", pg("42501"), true, fault},
		{"read-only transaction", pg("25006"), false, fault},
		{"serialization failure", pg("40001"), false, fault},
		{"deadlock", pg("40P01"), true, fault},
		{"lib/pq's read-only", sqlStateError("25006"), false, fault},
		{"unique violation", pg("23505"), true, notFault},
		{"statement timeout", pg("57014"), true, notFault},
		{"division by zero", pg("22012"), true, notFault},
		{"the handler's own error", errors.New("no such customer"), true, notFault},
		{"permanent, even of the database", fmt.Errorf("%w: %w", relayer.ErrPermanent, pg("42P01")), true, notFault},
		{"context ended", context.Canceled, true, notFault},
	} {
		if got := classify(tc.err, tc.fromHandler); got != tc.want {
			t.Errorf("%s: classify = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestReadinessStatementQuotesTheTable(t *testing.T) {
	got := readinessStatement(`"s"."it's"`)
	if want := `to_regclass('"s"."it''s"')`; !strings.Contains(got, want) {
		t.Errorf("statement %q lacks %q", got, want)
	}
}
