// Package testdb gives integration tests a PostgreSQL database.
//
// Every test package that needs a database declares
//
//	func TestMain(m *testing.M) { testdb.Main(m) }
//
// and its tests call URL, Open and NewSchema. Where the database comes from:
//
//   - If the environment variable RELAYER_TEST_DATABASE_URL (EnvURL) is set,
//     that database is used. The withdb command sets it so that a whole
//     "go test ./..." shares one throwaway cluster:
//     go run ./internal/tool/withdb -- go test -race ./...
//   - Otherwise Main starts a throwaway cluster with package pgcluster for
//     the test binary, installing Debian's postgresql package first if no
//     server binaries exist and the tests run as root, and stops it when the
//     tests are done.
//   - If neither works, tests that ask for the database are skipped with the
//     reason, or fail with it when the environment variable CI is "true", so
//     that a continuous-integration run never passes by skipping silently.
//
// Tests share the database, so each one works in its own schema from
// NewSchema; tests can then run in parallel, and repeatedly. The cluster's
// server is watched by a goroutine of package pgcluster for the life of the
// test binary; goroutine-leak checks should use goleak.IgnoreCurrent().
package testdb
