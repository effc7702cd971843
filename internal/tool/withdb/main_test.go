package main

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestExitCodes(t *testing.T) {
	t.Setenv(envURL, "postgres://example.invalid/db")
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--", "sh", "-c", "exit 3"}, 3},
		{[]string{"sh", "-c", "exit 0"}, 0},
		{[]string{"--", "sh", "-c", "kill -TERM $$"}, 128 + 15},
		{[]string{"--", "/no/such/command"}, 127},
		{[]string{"--"}, 2},
	} {
		if got := run(tc.args); got != tc.want {
			t.Errorf("run(%q) = %d, want %d", tc.args, got, tc.want)
		}
	}
}

func TestPassesURLThrough(t *testing.T) {
	t.Setenv(envURL, "postgres://example.invalid/db")
	out := filepath.Join(t.TempDir(), "url")
	if code := run([]string{"--", "sh", "-c", `printf %s "$RELAYER_TEST_DATABASE_URL" > "$0"`, out}); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	if got, _ := os.ReadFile(out); string(got) != "postgres://example.invalid/db" {
		t.Errorf("the command saw %s=%q", envURL, got)
	}
}

func TestStartsCluster(t *testing.T) {
	inCI, _ := strconv.ParseBool(os.Getenv("CI"))
	t.Setenv(envURL, "")
	t.Setenv("CI", "")
	dir := t.TempDir()
	out := filepath.Join(dir, "url")
	// The command checks that the URL works; psql is part of the server
	// packages' client dependencies, but may be missing: then it only
	// records the URL.
	script := `printf %s "$RELAYER_TEST_DATABASE_URL" > "$0"
if command -v psql >/dev/null; then psql "$RELAYER_TEST_DATABASE_URL" -Atc 'select 1' >/dev/null || exit 9; fi
exit 5`
	code := run([]string{"--", "sh", "-c", script, out})
	got, _ := os.ReadFile(out)
	if len(got) == 0 {
		if inCI {
			t.Fatal("no database could be started")
		}
		t.Skip("no database could be started")
	}
	if code != 5 {
		t.Errorf("exit code %d, want 5 (9 means psql could not connect)", code)
	}
	u, err := url.Parse(string(got))
	if err != nil || u.User.Username() != "postgres" || u.Hostname() != "127.0.0.1" {
		t.Fatalf("the command saw %s=%q", envURL, got)
	}
	if conn, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		conn.Close()
		t.Errorf("the cluster at %s still runs after withdb finished", u.Host)
	}
}
