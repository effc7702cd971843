// Package pgcluster starts and stops throwaway PostgreSQL clusters built from
// the PostgreSQL server binaries installed on the machine.
//
// It is used by the test helpers (package testdb and the withdb command) and
// by the demo command: no Docker and no pre-existing database are needed, only
// the initdb and postgres executables. On a Debian-like machine without them,
// Start can install Debian's postgresql package when running as root (see
// Options.Install).
//
// A cluster lives in a fresh temporary directory, listens on 127.0.0.1 on a
// free port (plus a Unix socket inside that directory), trusts every
// connection, and is tuned for speed rather than durability (fsync=off,
// full_page_writes=off). Its superuser is always called "postgres".
// PostgreSQL refuses to run as root, so when the calling program runs as root
// the cluster runs as the OS user "postgres" (or "nobody" if that does not
// exist), and the cluster directory is owned by that user.
//
// # Cleaning up
//
// The owner must call Cluster.Stop, which shuts the server down and removes
// the directory. Should the owning program die without doing so (a crash, a
// SIGKILL, a test binary killed on timeout), the server does not linger: on
// Linux it runs as a direct child of the owning program with a parent-death
// signal, so the kernel shuts it down as soon as the owner is gone. It also
// runs in its own process group, so a Ctrl-C typed in a terminal reaches the
// owner, which decides when to stop it, rather than the server itself. The
// directory of such an orphaned cluster is left behind and removed by the next
// Start that uses the same parent directory.
//
// While a cluster runs, one goroutine (in (*proc).supervise) waits for the
// server process; goroutine-leak checkers should ignore it, for example with
// goleak.IgnoreCurrent() or goleak.IgnoreAnyFunction(
// "github.com/relayer-go/relayer/internal/tool/pgcluster.(*proc).supervise").
package pgcluster
