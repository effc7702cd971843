package testdb_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

func schemaExists(t *testing.T, db *sql.DB, schema string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int
	if err := db.QueryRowContext(ctx, "select count(*) from pg_namespace where nspname = $1", schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func TestURL(t *testing.T) {
	u := testdb.URL(t)
	if u == "" {
		t.Fatal("empty URL")
	}
	if got := os.Getenv(testdb.EnvURL); got != u {
		t.Errorf("%s = %q in the environment, want %q", testdb.EnvURL, got, u)
	}
}

func TestDrivers(t *testing.T) {
	registered := sql.Drivers()
	drivers := testdb.Drivers()
	if len(drivers) == 0 || drivers[0] != "pgx" {
		t.Errorf("Drivers() = %q, want pgx first, always", drivers)
	}
	for _, d := range drivers {
		found := false
		for _, r := range registered {
			found = found || r == d
		}
		if !found {
			t.Errorf("driver %q is not registered (have %q)", d, registered)
		}
	}
}

func TestNewSchemaIsolation(t *testing.T) {
	for _, driver := range testdb.Drivers() {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			db := testdb.Open(t, driver)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			var dropped string
			t.Run("cleanup", func(t *testing.T) {
				a, b := testdb.NewSchema(t), testdb.NewSchema(t)
				if a == b {
					t.Fatalf("two schemas are both called %s", a)
				}
				for i, s := range []string{a, b} {
					if !identifier.MatchString(s) || len(s) > 63 {
						t.Errorf("schema name %q is not a valid unquoted identifier", s)
					}
					if !schemaExists(t, db, s) {
						t.Fatalf("schema %s does not exist", s)
					}
					// Same table name, different contents in each schema.
					mustExec(t, db, fmt.Sprintf("create table %s.items (n int)", s))
					for range i + 1 {
						mustExec(t, db, fmt.Sprintf("insert into %s.items values (1)", s))
					}
				}
				for want, s := range []string{a, b} {
					var n int
					if err := db.QueryRowContext(ctx, fmt.Sprintf("select count(*) from %s.items", s)).Scan(&n); err != nil {
						t.Fatal(err)
					}
					if n != want+1 {
						t.Errorf("%s.items has %d rows, want %d", s, n, want+1)
					}
				}
				dropped = a
			})
			if dropped == "" {
				t.FailNow()
			}
			if schemaExists(t, db, dropped) {
				t.Errorf("schema %s still exists after its test ended", dropped)
			}
		})
	}
}

func mustExec(t *testing.T, db *sql.DB, stmt string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

func TestSchemaNames(t *testing.T) {
	var (
		mu    sync.Mutex
		names = map[string]bool{}
	)
	for _, name := range []string{
		"plain",
		"Mixed Case/with-punctuation!!",
		"ÄÖÜ unicode ünïcödé",
		"___",
		strings.Repeat("very_long_test_name_", 10),
		"123 starts with digits",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for range 3 {
				s := testdb.NewSchema(t)
				if !identifier.MatchString(s) || len(s) > 63 || !strings.HasPrefix(s, "t_") {
					t.Errorf("schema name %q for test %q is not a valid unquoted identifier", s, t.Name())
				}
				mu.Lock()
				if names[s] {
					t.Errorf("schema name %s given twice", s)
				}
				names[s] = true
				mu.Unlock()
			}
		})
	}
}

func TestOpenUnknownDriver(t *testing.T) {
	testdb.URL(t) // skip without a database, like the other tests
	ft := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		testdb.Open(ft, "no-such-driver")
	}()
	<-done
	if !strings.Contains(ft.msg, "no-such-driver") {
		t.Errorf("Open with an unknown driver: got %q, want a fatal error naming it", ft.msg)
	}
}

// fatalTB records a call to Fatalf and ends its goroutine, like testing.T.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// OpenNamed's sessions carry the application name it returns, each call its
// own.
func TestOpenNamed(t *testing.T) {
	db, app := testdb.OpenNamed(t, "pgx")
	_, other := testdb.OpenNamed(t, "pgx")
	if app == other {
		t.Errorf("two calls gave the same name %q", app)
	}
	var got string
	if err := db.QueryRow(`SELECT current_setting('application_name')`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != app {
		t.Errorf("application_name %q, want %q", got, app)
	}
}
