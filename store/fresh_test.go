package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// otherConnector is a database/sql connector of a driver the store does not
// know, standing for any other driver or a wrapper around a known one.
type otherConnector struct{}

func (otherConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("not connected")
}
func (otherConnector) Driver() driver.Driver { return otherDriver{} }

type otherDriver struct{}

func (otherDriver) Open(string) (driver.Conn, error) { return nil, errors.New("not connected") }

// Only a driver known to hand out each row's bytes in memory of their own
// lets a store keep large bodies uncopied; any other, a wrapper included,
// and any handle that does not name its driver, keeps the copy.
func TestOnlyKnownDriversKeepBodiesUncopied(t *testing.T) {
	cfg, err := pgx.ParseConfig("postgres://127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	pgxDB := stdlib.OpenDB(*cfg)
	defer pgxDB.Close()
	other := sql.OpenDB(otherConnector{})
	defer other.Close()
	opts := Tables{Schema: "public"}
	for _, c := range []struct {
		name string
		db   DBTX
		want bool
	}{
		{"pgx stdlib", pgxDB, true},
		{"another driver", other, false},
		{"a *sql.DB with no driver", &sql.DB{}, false},
	} {
		s, err := New(c.db, opts)
		if err != nil {
			t.Fatal(err)
		}
		if s.freshBytes != c.want {
			t.Errorf("%s: keeps bodies uncopied = %t, want %t", c.name, s.freshBytes, c.want)
		}
		// With on a *sql.DB asks that database's driver; a transaction or
		// connection is taken to be of the store's own database.
		w, err := s.With(other)
		if err != nil {
			t.Fatal(err)
		}
		if w.freshBytes {
			t.Errorf("%s: With(another driver's database) keeps bodies uncopied", c.name)
		}
	}
	u, err := unbound(opts)
	if err != nil {
		t.Fatal(err)
	}
	if u.freshBytes {
		t.Error("an unbound store keeps bodies uncopied")
	}
}
