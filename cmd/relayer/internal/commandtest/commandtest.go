// Package commandtest runs the relayer command lines in-process for the
// tests of the command's packages.
package commandtest

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"
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
