// Command withdb runs a command with a PostgreSQL database for the
// integration tests, so that a whole "go test ./..." shares one throwaway
// cluster instead of starting one per package:
//
//	go run ./internal/tool/withdb -- go test -race ./...
//
// If RELAYER_TEST_DATABASE_URL is set, withdb just runs the command. Otherwise
// it starts a throwaway cluster (see package pgcluster; as root, on Debian, it
// first installs the postgresql package if no server is installed), runs the
// command with RELAYER_TEST_DATABASE_URL set to the cluster's URL and its
// standard input and output, stops the cluster, and exits with the command's
// exit code (128+n if the command was killed by signal n). SIGINT and SIGTERM
// are passed on to the command, and the cluster is stopped once it exits.
//
// If no database can be had, withdb says why and still runs the command,
// whose integration tests then skip with that reason; but when the
// environment variable CI is "true" it exits with status 1 instead.
package main
