package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/internal/testkit"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
	"github.com/relayer-go/relayer/transport/memory"
)

type driverPlaced struct{ N int }

func (driverPlaced) MessageType() string { return "tests.placed" }

type driverShipped struct{ N int }

func (driverShipped) MessageType() string { return "tests.shipped" }

// A Runner delivers on each database/sql driver, lib/pq included (imported
// only by this module): unordered rows by direct dispatch, ordered ones in
// per-key order. Its workers chain their transactions while busy (COMMIT AND
// CHAIN, which each driver passes through as a plain statement) and end the
// chains once idle, leaving no session idle in a transaction.
func TestRunnerOnEachDriver(t *testing.T) {
	t.Parallel()
	for _, driver := range testdb.Drivers() {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, app := testdb.OpenNamed(t, driver)
			var routes relayer.Routes
			if err := routes.Add("tests.placed", relayer.Route{Transport: "mem", Destination: "placed"}); err != nil {
				t.Fatal(err)
			}
			if err := routes.Add("tests.shipped", relayer.Route{Transport: "mem", Destination: "shipped", Ordered: true}); err != nil {
				t.Fatal(err)
			}
			mem := memory.New()
			outbox := relayer.Outbox{Schema: testdb.NewSchema(t), Routes: &routes, Transports: map[string]relayer.Transport{"mem": mem}}
			if _, err := store.Migrate(ctx, db, store.TablesOf(outbox)); err != nil {
				t.Fatal(err)
			}
			r, err := dispatch.NewRunner(db, outbox, dispatch.RunnerOptions{DisableCleanup: true})
			if err != nil {
				t.Fatal(err)
			}
			w, err := enlist.NewWriter(outbox, enlist.Options{Listener: r})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Stop(context.Background()) })
			const commits = 40
			for i := range commits {
				err := w.RunInTx(ctx, db, nil, func(tx *enlist.Tx) error {
					return tx.PublishAll(ctx, relayer.NewOutgoing(driverPlaced{i}),
						relayer.NewOutgoing(driverShipped{i}, relayer.Key(fmt.Sprintf("k%d", i%4))))
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			testkit.Eventually(t, 20*time.Second, func() bool {
				return len(mem.Messages("placed")) >= commits && len(mem.Messages("shipped")) >= commits
			}, "%d unordered and %d ordered messages sent", commits, commits)
			last := map[string]int{}
			for _, m := range mem.Messages("shipped") {
				var n int
				if _, err := fmt.Sscanf(string(m.Body), `{"N":%d}`, &n); err != nil {
					t.Fatalf("body %q: %v", m.Body, err)
				}
				if prev, ok := last[m.Key]; ok && n <= prev {
					t.Errorf("key %s: %d after %d", m.Key, n, prev)
				}
				last[m.Key] = n
			}
			idleInTx := func() int {
				var n int
				if err := db.QueryRow(`SELECT count(*) FROM pg_stat_activity
					WHERE application_name = $1 AND state = 'idle in transaction'`, app).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			testkit.Eventually(t, 10*time.Second, func() bool { return idleInTx() == 0 }, "no session idle in a transaction after the workers went idle")
		})
	}
}
