package enlist_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/enlist"
	"github.com/relayer-go/relayer/enlist/enlisttest"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

func TestWakeIntervalValidated(t *testing.T) {
	var routes relayer.Routes
	_ = relayer.AddType[enlisttest.Placed](&routes, relayer.Route{Transport: "mem", Destination: "orders"})
	for _, d := range []time.Duration{-time.Millisecond, time.Microsecond, 2 * time.Second} {
		_, err := enlist.NewWriter(relayer.Outbox{Routes: &routes}, enlist.Options{WakeInterval: d})
		if !errors.Is(err, enlist.ErrInvalidOptions) {
			t.Errorf("WakeInterval %s: %v, want ErrInvalidOptions", d, err)
		}
	}
}

// A burst of commits sends at most one NOTIFY per interval, the first at
// once and the last after the burst's last commit, so that no commit waits
// for a poll.
func TestWakeUpIsDebounced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.Open(t, "pgx")
	schema := testdb.NewSchema(t)
	opts := store.Tables{Schema: schema}
	if _, err := store.Migrate(ctx, db, opts); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, opts.ListenSQL()); err != nil {
		t.Fatal(err)
	}
	var routes relayer.Routes
	_ = relayer.AddType[enlisttest.Placed](&routes, relayer.Route{Transport: "mem", Destination: "orders"})
	const interval = 40 * time.Millisecond
	w, err := enlist.NewWriter(relayer.Outbox{Schema: schema, Routes: &routes}, enlist.Options{Wake: db, WakeInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var lastCommit time.Time
	for i := range 60 {
		if err := w.RunInTx(ctx, db, nil, func(tx *enlist.Tx) error { return tx.Publish(ctx, enlisttest.Placed{N: i}) }); err != nil {
			t.Fatal(err)
		}
		lastCommit = time.Now()
		time.Sleep(2 * time.Millisecond)
	}
	burst := lastCommit.Sub(start)
	// Collect the notifications until none comes for a few intervals.
	// Each payload is the lowest id of the commits the NOTIFY stands for:
	// of commits one after another, ids of a later time each.
	var got int
	var last time.Time
	var from uuid.UUID
	for {
		wctx, cancel := context.WithTimeout(ctx, 5*interval)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			break
		}
		id, perr := uuid.Parse(n.Payload)
		if perr != nil || n.Channel != opts.WakeChannel() || bytes.Compare(id[:], from[:]) <= 0 {
			t.Errorf("notification %+v, want on %s a message id after %v", n, opts.WakeChannel(), from)
		}
		from = id
		got++
		last = time.Now()
	}
	most := int(burst/interval) + 2
	if got == 0 || got > most || uint64(got) != w.WakeUps() {
		t.Errorf("%d notifications (the writer counts %d) for 60 commits in %s; want 1 to %d", got, w.WakeUps(), burst, most)
	}
	if last.Before(lastCommit) {
		t.Errorf("the last notification came %s before the last commit: that commit waits for a poll", lastCommit.Sub(last))
	}
}
