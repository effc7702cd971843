package workerstore

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/store"
)

// TestLaneCursorOfAnotherServerLifeReadsFromTheStart checks that a cursor
// made before the database server restarted or recovered from a crash is
// not trusted: the crash may have lost the asynchronous commit that
// delivered the rows it passed, which are then back.
func TestLaneCursorOfAnotherServerLifeReadsFromTheStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, s := emptyAnalyzedOutbox(t)
	msgs := make([]relayer.Message, 3)
	for i := range msgs {
		msgs[i] = relayer.Message{ID: uuid.Must(relayer.NewID()), Type: "t", Transport: "x", Destination: "d",
			Body: []byte("b"), Key: "k", Ordered: true, Lane: 0}
	}
	if err := s.Insert(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	token := uuid.New()
	read := func(from LaneCursor) ([]store.Row, []LaneRead) {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		st, _ := s.With(tx)
		if _, err := st.AcquireLaneLeasesFor(ctx, []int{0}, []string{"t"}, token, time.Minute); err != nil {
			t.Fatal(err)
		}
		rows, reads, err := st.ReadLanes(ctx, nil, []LaneCursor{from}, 10)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		return rows, reads
	}
	rows, reads := read(NewLaneCursor(0))
	if len(rows) != 3 || len(reads) != 1 || reads[0].server == "" {
		t.Fatalf("first read = %d rows, %+v", len(rows), reads)
	}
	// As if the first two had been delivered: the cursor passes them.
	cur := NewLaneCursor(0).Advance(reads[0], rows, 2, time.Time{})
	if rows, _ := read(cur); len(rows) != 1 || rows[0].ID != msgs[2].ID {
		t.Fatalf("read from the cursor = %d rows, want the third alone", len(rows))
	}
	cur.server = "another life"
	rows, _ = read(cur)
	var got []uuid.UUID
	for _, r := range rows {
		got = append(got, r.ID)
	}
	if want := []uuid.UUID{msgs[0].ID, msgs[1].ID, msgs[2].ID}; !slices.Equal(got, want) {
		t.Errorf("read from a cursor of another server life = %v, want the lane from its start %v", got, want)
	}
}

// TestHeldKeyHashIsTheDatabases checks that a worker adds the keys it holds
// to a cursor's digest with the hash the database sums: were they to differ,
// every read after a failure would start from the lane's start, or a
// release could go unseen.
func TestHeldKeyHashIsTheDatabases(t *testing.T) {
	t.Parallel()
	db, _ := emptyAnalyzedOutbox(t)
	for _, key := range []string{"", "a", "order-42", "ключ", "🔑 with spaces", strings.Repeat("long", 200)} {
		var want int32
		if err := db.QueryRow(`SELECT `+strings.ReplaceAll(heldKeyHash, "k.ordering_key", "$1::text"), key).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if got := heldKeyHashOf(key); got != want {
			t.Errorf("heldKeyHashOf(%.20q) = %d, the database's is %d", key, got, want)
		}
	}
	if got := addHeldKeys("2:-5", []string{"a", "a", "b"}); got != "4:"+strconv.FormatInt(-5+int64(heldKeyHashOf("a"))+int64(heldKeyHashOf("b")), 10) {
		t.Errorf("addHeldKeys = %s", got)
	}
	if got := addHeldKeys("nonsense", []string{"a"}); got != "" {
		t.Errorf("addHeldKeys of an unreadable digest = %q, want empty", got)
	}
}
