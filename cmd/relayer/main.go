// Command relayer runs the Relayer demo and the operator commands of an
// outbox in PostgreSQL.
//
// # Demo
//
//	go run ./cmd/relayer demo
//
// starts a throwaway PostgreSQL cluster and an embedded NATS JetStream server
// (or uses --database-url and --nats-url), writes orders and their messages
// through all five entry points (database/sql, sqlx, bun, GORM and pgx), delivers
// them with direct dispatch, ordered lane workers and recovery, consumes them
// back from JetStream and checks that every message arrived and that each
// customer's ordered messages arrived in order. It prints live progress (a
// redrawn bar on a terminal, plain lines otherwise) and a summary: messages
// written and delivered per entry point and route, per-key order, duplicates,
// throughput and commit-to-broker latency. It exits non-zero when a message is
// missing or out of order. Flags: --messages (default 2000), --workers
// (ordered workers, default 2), --duration (a cap, default 2m), --schema
// (default relayer_demo, emptied at start).
//
// # Operator commands
//
// Against an existing outbox (--database-url, --schema, --prefix):
//
//	relayer schema              print the DDL
//	relayer migrate             create or upgrade the tables (--check: exit 1 while steps
//	                            are pending or the tables are newer than the command)
//	relayer stats [--json] [--watch]
//	                            backlog, retries, parked keys, dead letters by reason,
//	                            paused destinations, members and lane owners
//	relayer lanes               the current lane assignment by member
//	relayer dead list           dead letters and why they died (filters: --id, --type,
//	                            --destination, --key, --reason, --older-than)
//	relayer dead show ID        one dead letter in full: headers and body
//	relayer dead requeue        move dead letters back into the outbox (filters or --all)
//	relayer dead purge          delete dead letters, such as --older-than 720h (filters or --all)
//	relayer parked list         parked keys: the parked head, its last error, rows waiting
//	relayer parked retry        release parked keys; each resumes at its head (--key, filters or --all)
//	relayer parked skip --key K move a key's parked head to the dead letters, breaking its order
//	relayer console             the web console: backlog, lanes, parked keys, dead letters,
//	                            messages, and their actions (--listen, --token, --read-only,
//	                            --show-bodies, --allowed-host, --max-conns, --query-timeout)
//
// # Relay
//
//	relayer run --transport nats=nats://nats:4222 --http :9090
//
// delivers an outbox's messages as a process of its own: recovery, the
// ordered lane workers and retention cleanup, configured by flags and
// RELAYER_* environment variables, with /healthz, /readyz and /metrics (see
// docs/relay.md). The program to deploy is ./relay: these commands without
// the demo and the benchmark, and without what they link (an embedded NATS
// server, a PostgreSQL installer, the benchmark harness).
//
// # Benchmarks
//
//	relayer bench [--database-url URL] [--scenario enlist,e2e,latency,drain,ordered] [--quick] [--json]
//
// measures, in a schema of its own (dropped afterwards unless --keep): what
// enlistment costs a business transaction, end-to-end throughput and
// commit-to-send latency, latency at a fixed rate (--rate), the drain of a
// backlog (--backlog) through recovery, and ordered dispatch with 1, 2 and 4
// workers, each counting lost, duplicate and out-of-order messages. Messages
// go to an in-process sink, or to NATS JetStream with --sink nats. Without
// --database-url it starts a throwaway PostgreSQL cluster.
//
// relayer version (or --version) prints the versions of the command and of
// the library it was built with, and the commit.
//
// --database-url defaults to the DATABASE_URL environment variable. Every
// command has -h with an example.
package main

import (
	"github.com/relayer-go/relayer/cmd/relayer/internal/cli"
	"github.com/relayer-go/relayer/cmd/relayer/internal/relay"
)

func main() { cli.Main(commands()) }

// commands are the deployable relayer's commands (see ./relay) with the
// demo first and the benchmark last.
func commands() []cli.Command {
	demo := cli.Command{Name: "demo", Summary: "run the end-to-end demo (throwaway PostgreSQL and embedded NATS)", Run: runDemo}
	bench := cli.Command{Name: "bench", Summary: "measure enlistment, throughput, latency, drain and ordered dispatch on a database", Run: runBench}
	return append(append([]cli.Command{demo}, cli.Commands(relay.Command)...), bench)
}
