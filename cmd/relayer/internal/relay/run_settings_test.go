package relay

import (
	"strings"
	"testing"

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
)

// unreachableDatabase is a database URL nothing answers: a run that gets
// past its command line and settings fails there, with exit status 1.
const unreachableDatabase = "postgres://nobody@127.0.0.1:1/nothing?connect_timeout=2"

// A RELAYER_* variable the relay does not read is refused before anything
// connects, naming the setting it is nearest to; the variables the relay
// reads, those a transport names with env:VAR and the tests' RELAYER_TEST_*
// pass.
//
// It sets environment variables, so it does not run in parallel.
func TestRunRefusesUnknownSettings(t *testing.T) {
	t.Setenv(transportsEnv, "")
	args := []string{"run", "--database-url", unreachableDatabase, "--transport", "events=env:RELAYER_EVENTS_URL"}
	t.Setenv("RELAYER_EVENTS_URL", "nats://127.0.0.1:1")
	t.Setenv("RELAYER_TEST_ANYTHING", "x")
	t.Setenv("RELAYER_ORDERED_WORKERS", "2")
	t.Setenv("RELAYER_RETRY_BACKOFF", "2s")

	r := runCmd(t, args...)
	if r.Code != command.ExitFail || !strings.Contains(r.Stderr, "cannot connect") {
		t.Fatalf("with known settings only: code %d, stderr %q; want %d at the database", r.Code, r.Stderr, command.ExitFail)
	}

	for _, tc := range []struct{ name, want string }{
		{"RELAYER_ORDERD_WORKERS", "unknown setting RELAYER_ORDERD_WORKERS; did you mean RELAYER_ORDERED_WORKERS?"},
		{"RELAYER_RETRY_ATTEMPTS", "unknown setting RELAYER_RETRY_ATTEMPTS; did you mean RELAYER_RETRY_MAX_ATTEMPTS?"},
		{"RELAYER_TRANSPORT", "unknown setting RELAYER_TRANSPORT; did you mean RELAYER_TRANSPORTS?"},
		{"RELAYER_TEST", "unknown setting RELAYER_TEST: relayer run reads no such variable"},
		{"RELAYER_FROBNICATE", "unknown setting RELAYER_FROBNICATE: relayer run reads no such variable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.name, "s3cret-value")
			r := runCmd(t, args...)
			if r.Code != command.ExitUsage || !strings.Contains(r.Stderr, tc.want) {
				t.Errorf("code %d, stderr %q; want %d with %q", r.Code, r.Stderr, command.ExitUsage, tc.want)
			}
			if strings.Contains(r.Stderr, "s3cret-value") || strings.Count(r.Stderr, "\n") != 1 {
				t.Errorf("want one line without the value: %q", r.Stderr)
			}
		})
	}
}

// --lanes 0 is refused as out of range, while a --lanes not given reads the
// outbox's count.
func TestRunRefusesZeroLanes(t *testing.T) {
	t.Parallel()
	base := []string{"run", "--database-url", unreachableDatabase, "--transport", "events=nats://127.0.0.1:1"}
	for _, lanes := range []string{"0", "-1", "65537"} {
		r := runCmd(t, append(base, "--lanes", lanes)...)
		if want := "--lanes must be 1 to 65536, got " + lanes; r.Code != command.ExitUsage || !strings.Contains(r.Stderr, want) {
			t.Errorf("--lanes %s: code %d, stderr %q; want %d with %q", lanes, r.Code, r.Stderr, command.ExitUsage, want)
		}
	}
	if r := runCmd(t, base...); r.Code != command.ExitFail || !strings.Contains(r.Stderr, "cannot connect") {
		t.Errorf("without --lanes: code %d, stderr %q; want %d at the database", r.Code, r.Stderr, command.ExitFail)
	}
}
