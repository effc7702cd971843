package pgxlisten_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/dispatch/pgxlisten"
)

type otherDriver struct{}

func (otherDriver) Open(string) (driver.Conn, error) { return nil, errors.New("not a database") }

func init() { sql.Register("pgxlisten-test-other", otherDriver{}) }

// Check accepts pgx's pools only, and Wait pgx's connections only.
func TestWaiterRefusesOtherDrivers(t *testing.T) {
	other, err := sql.Open("pgxlisten-test-other", "")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := (pgxlisten.Waiter{}).Check(other); !errors.Is(err, pgxlisten.ErrNotPgx) {
		t.Errorf("Check(another driver's pool) = %v, want ErrNotPgx", err)
	}
	pgx, err := sql.Open("pgx", "postgres://127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer pgx.Close()
	if err := (pgxlisten.Waiter{}).Check(pgx); err != nil {
		t.Errorf("Check(pgx's pool) = %v, want nil", err)
	}
	called := false
	err = (pgxlisten.Waiter{}).Wait(context.Background(), struct{}{}, "LISTEN x", func() { called = true }, func() { called = true })
	if !errors.Is(err, pgxlisten.ErrNotPgx) || called {
		t.Errorf("Wait(another connection) = %v (callbacks called: %v), want ErrNotPgx and no call", err, called)
	}
}

// The waiter hands runners the payloads recovery takes again from.
var _ dispatch.PayloadWaiter = pgxlisten.Waiter{}
