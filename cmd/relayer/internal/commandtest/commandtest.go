// Package commandtest runs the relayer command lines in-process for the
// tests of the command's packages.
package commandtest

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

// RunFunc runs one command line, writing to stdout and stderr, and returns
// its exit status: cli.Run with a command table.
type RunFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// Result is the outcome of one in-process run of a command line.
type Result struct {
	Code           int
	Stdout, Stderr string
}

// Run runs the command line args in-process through run, within 90 s.
func Run(t testing.TB, run RunFunc, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr)
	return Result{Code: code, Stdout: stdout.String(), Stderr: stderr.String()}
}

// Migrated returns the test database's URL and a schema of the test's own
// holding a migrated outbox.
func Migrated(t testing.TB) (url, schema string) {
	t.Helper()
	url = testdb.URL(t)
	schema = testdb.NewSchema(t)
	db, err := command.OpenDB(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := store.Migrate(t.Context(), db, store.Tables{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	return url, schema
}
