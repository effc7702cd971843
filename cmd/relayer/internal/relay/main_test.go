package relay

import (
	"context"
	"io"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/relayer-go/relayer/cmd/relayer/internal/cli"
	"github.com/relayer-go/relayer/cmd/relayer/internal/commandtest"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
)

// asCommandEnv set to 1 makes the test binary the relayer command: the
// process tests run it so.
const asCommandEnv = "RELAYER_TEST_AS_COMMAND"

func TestMain(m *testing.M) {
	if os.Getenv(asCommandEnv) == "1" {
		cli.Main(cli.Commands(Command))
		return
	}
	testdb.Main(m)
}

// run runs the command line args in-process, as the deployable relayer
// does.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Run(ctx, cli.Commands(Command), args, stdout, stderr)
}

// result is the outcome of one in-process run of the command.
type result = commandtest.Result

// runCmd runs the command line args in-process.
func runCmd(t *testing.T, args ...string) result { return commandtest.Run(t, run, args...) }

// migrated returns the test database's URL and a schema of the test's own
// holding a migrated outbox.
func migrated(t *testing.T) (string, string) { return commandtest.Migrated(t) }

// startNATSServer runs an embedded JetStream server for the rest of the
// test and returns its URL.
func startNATSServer(t testing.TB) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("the embedded NATS server did not get ready within 10s")
	}
	return s.ClientURL()
}
