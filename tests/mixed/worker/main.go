// Command worker is the worker process of the mixed-version test
// (package mixed): a Runner of whichever Relayer release it is compiled
// against, sending the outbox's messages to a file.
//
// The test compiles this file twice, against this release and inside the
// previous release's source tree, so it uses only what both releases offer:
// relayer.Outbox and Routes, dispatch.NewRunner and the fields of
// dispatch.RunnerOptions both have, enlist.Writer. What differs, turning on
// the wake-up listener, is in listen.go, of which the test writes the
// previous release's version (see package mixed).
//
//	worker -database-url URL -schema S -name N -arrivals FILE -refuse-until FILE [-lease D] [-poll D] [-listen]
//	worker -database-url URL -schema S -publish N -key K
//
// Each message sent is appended to the arrivals file as one line, "<id>
// <key> <body>", by one write to a file opened with O_APPEND, so that the
// lines of every worker process land whole and in the order of their
// sends. Messages whose key starts with "refused-" are refused while the
// file named by -refuse-until does not exist, so that their keys park.
// Lane, membership and recovery leases last -lease (default 2s), and the
// workers poll every -poll (default 100 ms), so that a killed worker's lanes
// move on soon. With -listen the Runner listens for the writers' wake-ups,
// and recovery takes rows at once. The process prints "started" once its
// Runner runs (and listens, with -listen), and stops it on SIGTERM.
//
// With -publish the program is a writer instead: it commits N transactions
// of one ordered message on key K and one unordered message each, with the
// wake-up across processes on, prints "published <ordered id> <unordered
// id>" for each, and exits.
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

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
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
	poll := flag.Duration("poll", 100*time.Millisecond, "poll interval of the ordered workers and recovery")
	wake := flag.Bool("listen", false, "listen for the writers' wake-ups")
	publishN := flag.Int("publish", 0, "publish this many transactions instead of running workers")
	key := flag.String("key", "", "the ordering key of the published messages")
	flag.Parse()
	if *publishN > 0 {
		if *url == "" || *schema == "" || *key == "" {
			return errors.New("-database-url, -schema and -key are required with -publish")
		}
		return publish(*url, *schema, *key, *publishN)
	}
	if *url == "" || *schema == "" || *name == "" || *arrivals == "" || *refuseUntil == "" {
		return errors.New("-database-url, -schema, -name, -arrivals and -refuse-until are required")
	}
	out, err := os.OpenFile(*arrivals, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()

	outbox, err := workerOutbox(*schema, &fileTransport{out: out, refuseUntil: *refuseUntil})
	if err != nil {
		return err
	}
	opts := dispatch.RunnerOptions{
		Ordered:  dispatch.OrderedOptions{Name: *name, LeaseDuration: *lease, PollInterval: *poll},
		Recovery: dispatch.RecoveryOptions{LeaseDuration: *lease, PollInterval: *poll, MinAge: 300 * time.Millisecond},
	}
	if *wake {
		// No writer of this process tells direct dispatch of its commits:
		// recovery takes what the wake-ups point at, however young.
		opts.Recovery.MinAge = time.Millisecond
		listen(&opts)
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
	for *wake && !listening(r) {
		select {
		case <-ctx.Done():
			return r.Stop(context.Background())
		case <-time.After(10 * time.Millisecond):
		}
	}
	fmt.Println("started")
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.Stop(sctx)
}

// workerOutbox is the outbox of schema whose steps and events the workers
// send through tr, a step retried once before it is parked.
func workerOutbox(schema string, tr *fileTransport) (relayer.Outbox, error) {
	var routes relayer.Routes
	retry := relayer.Retry{MaxAttempts: 2, Backoff: 20 * time.Millisecond}
	if err := routes.Add("mixed.step", relayer.Route{Transport: "file", Destination: "steps", Ordered: true, Retry: retry}); err != nil {
		return relayer.Outbox{}, err
	}
	if err := routes.Add("mixed.event", relayer.Route{Transport: "file", Destination: "events"}); err != nil {
		return relayer.Outbox{}, err
	}
	return relayer.Outbox{Schema: schema, Routes: &routes, Transports: map[string]relayer.Transport{"file": tr}}, nil
}

// publish commits n transactions of one step on key and one event each,
// waking the workers of other processes after each commit.
func publish(url, schema, key string, n int) error {
	var routes relayer.Routes
	if err := routes.Add("mixed.step", relayer.Route{Transport: "file", Destination: "steps", Ordered: true}); err != nil {
		return err
	}
	if err := routes.Add("mixed.event", relayer.Route{Transport: "file", Destination: "events"}); err != nil {
		return err
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		return err
	}
	defer db.Close()
	w, err := enlist.NewWriter(relayer.Outbox{Schema: schema, Routes: &routes}, enlist.Options{Wake: db})
	if err != nil {
		return err
	}
	ctx := context.Background()
	for i := range n {
		s := relayer.NewOutgoing(step{Key: key, Seq: i + 1}, relayer.Key(key))
		e := relayer.NewOutgoing(event{Seq: i + 1})
		s.ID, e.ID = uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
		if err := w.RunInTx(ctx, db, nil, func(tx *enlist.Tx) error { return tx.PublishAll(ctx, s, e) }); err != nil {
			return err
		}
		fmt.Println("published", s.ID, e.ID)
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// step and event are the test's messages, as the routes name them.
type (
	step struct {
		Key string
		Seq int
	}
	event struct{ Seq int }
)

func (step) MessageType() string  { return "mixed.step" }
func (event) MessageType() string { return "mixed.event" }

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
