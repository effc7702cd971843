package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver

	"github.com/relayer-go/relayer/internal/tool/pgcluster"
)

// EnvURL names the environment variable holding the URL of the database the
// tests use. When it is empty, Main starts a throwaway cluster and sets it.
const EnvURL = "RELAYER_TEST_DATABASE_URL"

// Drivers returns the database/sql drivers that tests run once each: pgx's
// stdlib driver ("pgx"), which this package registers, and lib/pq
// ("postgres") when the test binary imports it. The published modules'
// tests run on pgx alone, so that lib/pq stays out of their requirements;
// the tests module imports lib/pq and runs the store's, the inbox's and the
// adapters' conformance tests on both.
func Drivers() []string {
	var out []string
	for _, d := range []string{"pgx", "postgres"} {
		if slices.Contains(sql.Drivers(), d) {
			out = append(out, d)
		}
	}
	return out
}

const (
	startTimeout = 10 * time.Minute // includes installing PostgreSQL
	opTimeout    = time.Minute
	maxOpenConns = 10
	schemaPrefix = "t_"
	maxNamePart  = 30
)

// State set by Main before the tests run, read-only afterwards.
var (
	mainCalled  bool
	baseURL     string
	unavailable string // why there is no database, if there is none
)

// Main runs the tests of a package that uses a database; call it from
// TestMain:
//
//	func TestMain(m *testing.M) { testdb.Main(m) }
//
// If EnvURL is set, the tests use that database. Otherwise Main starts a
// throwaway cluster (see package pgcluster; this takes a second or two, plus
// the installation of PostgreSQL where needed and possible), sets EnvURL for
// this process, runs the tests and stops the cluster. If no database can be
// had, the tests still run, and those that need one are skipped (or fail in
// CI) with the reason. Main does not return: it exits with the tests' code.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	mainCalled = true
	if u := os.Getenv(EnvURL); u != "" {
		baseURL = u
		return m.Run()
	}
	if !flag.Parsed() {
		flag.Parse()
	}
	logf := func(format string, args ...any) {
		if testing.Verbose() {
			fmt.Fprintf(os.Stderr, "testdb: "+format+"\n", args...)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Install: true, Logf: logf})
	cancel()
	if err != nil {
		unavailable = fmt.Sprintf("no test database: %s is not set, and starting a throwaway PostgreSQL cluster failed: %v", EnvURL, err)
		fmt.Fprintln(os.Stderr, "testdb: "+unavailable)
		return m.Run()
	}
	baseURL = cluster.URL()
	os.Setenv(EnvURL, baseURL)
	code := m.Run()
	if err := cluster.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "testdb:", err)
	}
	return code
}

// URL returns the URL of the test database. If there is none, it skips the
// test with the reason, or, when the environment variable CI is "true", fails
// it: a CI run must not pass by skipping its integration tests.
func URL(tb testing.TB) string {
	tb.Helper()
	if baseURL != "" {
		return baseURL
	}
	reason := unavailable
	if !mainCalled {
		if u := os.Getenv(EnvURL); u != "" {
			return u
		}
		reason = fmt.Sprintf("no test database: %s is not set, and testdb.Main is not called from TestMain to start a throwaway cluster", EnvURL)
	}
	if inCI() {
		tb.Fatal(reason + " (failing rather than skipping because CI=true)")
	} else {
		tb.Skip(reason)
	}
	return ""
}

// inCI reports whether the tests run in continuous integration, where a
// missing database is an error.
func inCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// NewSchema creates a schema with a fresh name, made of "t_", a prefix of the
// test's name and a random suffix, and drops it with everything in it when
// the test ends. The name is a valid unquoted PostgreSQL identifier
// ([a-z_][a-z0-9_]*, at most 63 bytes), so it can be pasted into SQL as is.
func NewSchema(tb testing.TB) string {
	tb.Helper()
	dbURL := URL(tb)
	name := schemaName(tb.Name())
	if err := adminExec(dbURL, "CREATE SCHEMA "+name); err != nil {
		tb.Fatalf("testdb: creating schema %s: %v", name, err)
	}
	tb.Cleanup(func() {
		if err := adminExec(dbURL, "DROP SCHEMA IF EXISTS "+name+" CASCADE"); err != nil {
			tb.Errorf("testdb: dropping schema %s: %v", name, err)
		}
	})
	return name
}

// schemaName returns a fresh schema name for a test.
func schemaName(testName string) string {
	var b strings.Builder
	underscore := true // no leading underscore
	for _, r := range strings.ToLower(testName) {
		if b.Len() >= maxNamePart {
			break
		}
		switch {
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
			underscore = false
		case !underscore:
			b.WriteByte('_')
			underscore = true
		}
	}
	part := strings.TrimRight(b.String(), "_")
	var random [8]byte
	rand.Read(random[:])
	if part == "" {
		return schemaPrefix + hex.EncodeToString(random[:])
	}
	return schemaPrefix + part + "_" + hex.EncodeToString(random[:])
}

// adminExec runs one statement on a short-lived connection.
func adminExec(dbURL, stmt string) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	_, err = db.ExecContext(ctx, stmt)
	return err
}

// Open opens the test database with the given database/sql driver, "pgx" or
// "postgres" (lib/pq, when the test binary imports it; see Drivers), checks the connection and closes the
// *sql.DB when the test ends. The pool holds at most 10 connections.
func Open(tb testing.TB, driver string) *sql.DB {
	tb.Helper()
	return open(tb, driver, URL(tb))
}

// OpenNamed is Open with a connection parameter application_name of its own,
// which it returns: a test finds its sessions in pg_stat_activity by it.
func OpenNamed(tb testing.TB, driver string) (*sql.DB, string) {
	tb.Helper()
	u, err := url.Parse(URL(tb))
	if err != nil {
		tb.Fatalf("testdb: parsing the test database's URL: %v", err)
	}
	var random [8]byte
	rand.Read(random[:])
	app := "relayer_test_" + hex.EncodeToString(random[:])
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return open(tb, driver, u.String()), app
}

func open(tb testing.TB, driver, dbURL string) *sql.DB {
	tb.Helper()
	if !slices.Contains(sql.Drivers(), driver) {
		tb.Fatalf("testdb: unknown database/sql driver %q (registered: %q)", driver, sql.Drivers())
	}
	db, err := sql.Open(driver, dbURL)
	if err != nil {
		tb.Fatalf("testdb: opening the test database with driver %s: %v", driver, err)
	}
	tb.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(maxOpenConns)
	db.SetMaxIdleConns(maxOpenConns)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		tb.Fatalf("testdb: connecting to the test database with driver %s: %v", driver, err)
	}
	return db
}
