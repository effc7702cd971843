// Command worker is the worker process of the mixed-version test
// (package mixed): a Runner of whichever Relayer release it is compiled
// against, sending the outbox's messages to a file.
//
// The test compiles this one file twice, against this release and inside
// the previous release's source tree, so it uses only what both releases
// offer: relayer.Outbox and Routes, dispatch.NewRunner and the fields of
// dispatch.RunnerOptions both have.
//
//	worker -database-url URL -schema S -name N -arrivals FILE -refuse-until FILE [-lease D]
//
// Each message sent is appended to the arrivals file as one line, "<id>
// <key> <body>", by one write to a file opened with O_APPEND, so that the
// lines of every worker process land whole and in the order of their
// sends. Messages whose key starts with "refused-" are refused while the
// file named by -refuse-until does not exist, so that their keys park.
// Lane, membership and recovery leases last -lease (default 2s), and the
// workers poll every 100 ms, so that a killed worker's lanes move on soon.
// The process prints "started" once its Runner runs, and stops it on
// SIGTERM.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run() error {
	url := flag.String("database-url", "", "PostgreSQL URL")
	schema := flag.String("schema", "", "schema of the outbox")
	name := flag.String("name", "", "the worker's name")
	arrivals := flag.String("arrivals", "", "file the sent messages are appended to")
	refuseUntil := flag.String("refuse-until", "", "while this file does not exist, keys starting with refused- are refused")
	lease := flag.Duration("lease", 2*time.Second, "lease duration of lanes, members and recovery")
	flag.Parse()
	if *url == "" || *schema == "" || *name == "" || *arrivals == "" || *refuseUntil == "" {
		return errors.New("-database-url, -schema, -name, -arrivals and -refuse-until are required")
	}
	out, err := os.OpenFile(*arrivals, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()

	var routes relayer.Routes
	retry := relayer.Retry{MaxAttempts: 2, Backoff: 20 * time.Millisecond}
	if err := routes.Add("mixed.step", relayer.Route{Transport: "file", Destination: "steps", Ordered: true, Retry: retry}); err != nil {
		return err
	}
	if err := routes.Add("mixed.event", relayer.Route{Transport: "file", Destination: "events"}); err != nil {
		return err
	}
	outbox := relayer.Outbox{Schema: *schema, Routes: &routes,
		Transports: map[string]relayer.Transport{"file": &fileTransport{out: out, refuseUntil: *refuseUntil}}}
	poll := 100 * time.Millisecond
	opts := dispatch.RunnerOptions{
		Ordered:  dispatch.OrderedOptions{Name: *name, LeaseDuration: *lease, PollInterval: poll},
		Recovery: dispatch.RecoveryOptions{LeaseDuration: *lease, PollInterval: poll, MinAge: 300 * time.Millisecond},
	}
	db, err := sql.Open("pgx", *url)
	if err != nil {
		return err
	}
	defer db.Close()
	r, err := dispatch.NewRunner(db, outbox, opts)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := r.Start(ctx); err != nil {
		return err
	}
	fmt.Println("started")
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.Stop(sctx)
}

// fileTransport appends each message it sends to a file.
type fileTransport struct {
	mu          sync.Mutex
	out         *os.File
	refuseUntil string
}

func (f *fileTransport) Capabilities(context.Context, string) (relayer.Capabilities, error) {
	// One message per send, so that a refused key fails alone.
	return relayer.Capabilities{MaxBatchSize: 1, OrderedByKey: true}, nil
}

func (f *fileTransport) SendBatch(ctx context.Context, msgs []*relayer.Message) error {
	for _, m := range msgs {
		if err := f.Send(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

func (f *fileTransport) Send(ctx context.Context, m *relayer.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if strings.HasPrefix(m.Key, "refused-") {
		if _, err := os.Stat(f.refuseUntil); err != nil {
			return fmt.Errorf("key %s refused until %s exists", m.Key, f.refuseUntil)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, err := fmt.Fprintf(f.out, "%s %s %s\n", m.ID, m.Key, m.Body)
	return err
}
