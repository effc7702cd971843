package main

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

func TestConsoleNeedsATokenOffLoopback(t *testing.T) {
	t.Parallel()
	for _, listen := range []string{"0.0.0.0:8080", ":8080", "192.0.2.1:8080"} {
		r := runCmd(t, "console", "--database-url", "postgres://nowhere/db", "--listen", listen)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--token") {
			t.Errorf("--listen %s without --token: code %d, stderr %q", listen, r.code, r.stderr)
		}
	}
	if r := runCmd(t, "console", "-h"); r.code != exitOK || !strings.Contains(r.stderr, "example:\n  relayer console") {
		t.Errorf("console -h: code %d\n%s", r.code, r.stderr)
	}
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var servingOn = regexp.MustCompile(`on (http://[0-9.:]+/)`)

// The command serves the console until Ctrl-C, refusing requests without
// its token.
func TestConsoleServesUntilInterrupted(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	schema := testdb.NewSchema(t)
	db, err := openDB(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := store.Migrate(t.Context(), db, store.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"console", "--database-url", url, "--schema", schema, "--listen", "127.0.0.1:0", "--token", "t0ken", "--read-only"}, &stdout, &stderr)
	}()
	var base string
	deadline := time.Now().Add(20 * time.Second)
	for base == "" {
		if m := servingOn.FindStringSubmatch(stdout.String()); m != nil {
			base = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("the console did not say where it serves; stdout %q, stderr %q", stdout.String(), stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(stdout.String(), "read-only") {
		t.Errorf("the start line does not say read-only: %q", stdout.String())
	}
	resp, err := http.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", resp.StatusCode)
	}
	req, _ := http.NewRequest("GET", base, nil)
	req.Header.Set("Authorization", "Bearer t0ken")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("with the token: %d", resp.StatusCode)
	}
	cancel()
	select {
	case c := <-code:
		if c != exitOK {
			t.Errorf("exit code %d after Ctrl-C, stderr %q", c, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the console did not stop after Ctrl-C")
	}
}
