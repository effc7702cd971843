package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/internal/tool/proccpu"
	"github.com/relayer-go/relayer/internal/workerstore"
	"github.com/relayer-go/relayer/store"
)

const benchBatch = 100

// BenchmarkStore measures the store's batch operations on 100 rows, one
// statement (one round trip) each, on every driver. rows/s is the figure to
// compare; ns/op is per batch of 100.
func BenchmarkStore(b *testing.B) {
	for _, driver := range testdb.Drivers() {
		b.Run(driver, func(b *testing.B) {
			b.Run("insert", func(b *testing.B) { benchInsert(b, driver) })
			b.Run("read", func(b *testing.B) { benchRead(b, driver) })
			b.Run("claim", func(b *testing.B) { benchClaim(b, driver, false) })
			b.Run("complete", func(b *testing.B) { benchClaim(b, driver, true) })
		})
	}
}

func benchSetup(b *testing.B, driver string) (*workerstore.Store, func(n int) []relayer.Message) {
	db := testdb.Open(b, driver)
	opts := store.Tables{Schema: testdb.NewSchema(b), TablePrefix: "bench_"}
	if _, err := store.Migrate(context.Background(), db, opts); err != nil {
		b.Fatal(err)
	}
	s, err := workerstore.New(db, opts)
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 256)
	mk := func(n int) []relayer.Message {
		msgs := make([]relayer.Message, n)
		for i := range msgs {
			id, _ := relayer.NewID()
			msgs[i] = relayer.Message{ID: id, Type: "bench.Event", Body: body, Transport: "mem", Destination: "events"}
		}
		return msgs
	}
	return s, mk
}

func reportRows(b *testing.B, rows int) {
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
}

func benchInsert(b *testing.B, driver string) {
	s, mk := benchSetup(b, driver)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		msgs := mk(benchBatch)
		b.StartTimer()
		if err := s.Insert(ctx, msgs); err != nil {
			b.Fatal(err)
		}
	}
	reportRows(b, b.N*benchBatch)
}

func benchRead(b *testing.B, driver string) {
	s, mk := benchSetup(b, driver)
	ctx := context.Background()
	for range 100 {
		if err := s.Insert(ctx, mk(100)); err != nil {
			b.Fatal(err)
		}
	}
	var buf []store.Row
	after := uuid.Nil
	b.ReportAllocs()
	for b.Loop() {
		var err error
		buf, err = s.ReadUnordered(ctx, buf, store.ReadOptions{After: after, Limit: benchBatch})
		if err != nil {
			b.Fatal(err)
		}
		if len(buf) < benchBatch {
			after = uuid.Nil
		} else {
			after = buf[len(buf)-1].ID
		}
	}
	reportRows(b, b.N*benchBatch)
}

// benchClaim times ClaimBatch, or CompleteBatch of freshly claimed rows.
func benchClaim(b *testing.B, driver string, complete bool) {
	s, mk := benchSetup(b, driver)
	ctx := context.Background()
	var buf []store.Row
	ids := make([]uuid.UUID, benchBatch)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		msgs := mk(benchBatch)
		if err := s.Insert(ctx, msgs); err != nil {
			b.Fatal(err)
		}
		for i := range msgs {
			ids[i] = msgs[i].ID
		}
		now := time.Now()
		c := store.NewClaim(now, time.Minute)
		if !complete {
			b.StartTimer()
		}
		var err error
		buf, err = s.ClaimBatch(ctx, buf, ids, c, now)
		if err != nil || len(buf) != benchBatch {
			b.Fatalf("ClaimBatch = %d rows, %v", len(buf), err)
		}
		if complete {
			b.StartTimer()
			n, err := s.CompleteBatch(ctx, ids, c.Token, now)
			if err != nil || n != benchBatch {
				b.Fatalf("CompleteBatch = %d, %v", n, err)
			}
		} else {
			b.StopTimer()
			if _, err := s.CompleteBatch(ctx, ids, c.Token, now); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	reportRows(b, b.N*benchBatch)
}

// BenchmarkReadLarge reads 5,000-row pages, the size of a recovery take: the
// client's cost of scanning rows (allocs/op and the Go profile) shows here.
func BenchmarkReadLarge(b *testing.B) {
	for _, driver := range testdb.Drivers() {
		b.Run(driver, func(b *testing.B) {
			const page = 5000
			s, mk := benchSetup(b, driver)
			ctx := context.Background()
			for range 2 {
				if err := s.Insert(ctx, mk(page)); err != nil {
					b.Fatal(err)
				}
			}
			var buf []store.Row
			after := uuid.Nil
			b.ReportAllocs()
			for b.Loop() {
				var err error
				buf, err = s.ReadUnordered(ctx, buf, store.ReadOptions{After: after, Limit: page})
				if err != nil || len(buf) != page {
					b.Fatalf("read %d rows, %v", len(buf), err)
				}
				after = buf[len(buf)-1].ID
				if after == buf[0].ID || len(buf) < page {
					after = uuid.Nil
				}
				if next, _ := s.ReadUnordered(ctx, nil, store.ReadOptions{After: after, Limit: 1}); len(next) == 0 {
					after = uuid.Nil
				}
			}
			reportRows(b, b.N*page)
		})
	}
}

// BenchmarkLaneReadBloat measures one ordered batch's read of 16 lanes
// (100 rows each) after 90% of a 40,000-row backlog was delivered, with and
// without a REPEATABLE READ snapshot held open since before the deliveries,
// which keeps vacuum and index scans from dropping the delivered rows' dead
// index entries. "cursor" reads each lane from past what was delivered
// (workerstore.LaneCursor), as a worker that keeps its lanes does; "start" reads
// from each lane's first entry, as a worker does when it takes a lane over.
// Compare ns/op across the four.
func BenchmarkLaneReadBloat(b *testing.B) {
	for _, held := range []bool{false, true} {
		name := "no snapshot"
		if held {
			name = "snapshot held"
		}
		b.Run(name, func(b *testing.B) {
			s, db, cursors := bloatedLanes(b, held)
			lanes := make([]int, len(cursors))
			fromStart := make([]workerstore.LaneCursor, len(cursors))
			for i, c := range cursors {
				lanes[i], fromStart[i] = c.Lane, workerstore.NewLaneCursor(c.Lane)
			}
			for _, mode := range []struct {
				name string
				from []workerstore.LaneCursor
			}{{"start", fromStart}, {"cursor", cursors}} {
				b.Run(mode.name, func(b *testing.B) {
					ctx := context.Background()
					token := uuid.MustParse(benchToken)
					var buf []store.Row
					for b.Loop() {
						tx, err := db.BeginTx(ctx, nil)
						if err != nil {
							b.Fatal(err)
						}
						st, _ := s.With(tx)
						if _, err := st.AcquireLaneLeasesFor(ctx, lanes, owners("bench", len(lanes)), token, time.Minute); err != nil {
							b.Fatal(err)
						}
						if buf, _, err = st.ReadLanes(ctx, buf, mode.from, benchBatch); err != nil || len(buf) != len(lanes)*benchBatch {
							b.Fatalf("ReadLanes = %d rows, %v", len(buf), err)
						}
						_ = tx.Rollback()
					}
				})
			}
		})
	}
}

const benchToken = "0190a000-0000-7000-8000-0000000000be"

// bloatedLanes fills 16 lanes with 2,500 rows each and delivers the first
// 90% of every lane as a worker does, from cursors, with a snapshot held
// open throughout when held, then vacuums the outbox. It returns the store,
// its database and the lanes' cursors.
func bloatedLanes(b *testing.B, held bool) (*workerstore.Store, *sql.DB, []workerstore.LaneCursor) {
	ctx := context.Background()
	db := testdb.Open(b, "pgx")
	opts := store.Tables{Schema: testdb.NewSchema(b), TablePrefix: "bloat_"}
	if _, err := store.Migrate(ctx, db, opts); err != nil {
		b.Fatal(err)
	}
	s, err := workerstore.New(db, opts)
	if err != nil {
		b.Fatal(err)
	}
	const lanes, perLane = 16, 2500
	body := make([]byte, 256)
	msgs := make([]relayer.Message, 0, 1000)
	for i := range lanes * perLane {
		id, _ := relayer.NewID()
		msgs = append(msgs, relayer.Message{ID: id, Type: "bench.Event", Body: body, Transport: "mem", Destination: "events",
			Key: "k" + strconv.Itoa(i), Ordered: true, Lane: i % lanes})
		if len(msgs) == cap(msgs) {
			if err := s.Insert(ctx, msgs); err != nil {
				b.Fatal(err)
			}
			msgs = msgs[:0]
		}
	}
	if held {
		conn, err := db.Conn(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			_, _ = conn.ExecContext(ctx, `ROLLBACK`)
			_ = conn.Close()
		})
		if _, err := conn.ExecContext(ctx, `BEGIN ISOLATION LEVEL REPEATABLE READ`); err != nil {
			b.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, `SELECT count(*) FROM "`+opts.Schema+`"."bloat_outbox"`); err != nil {
			b.Fatal(err)
		}
	}
	cursors := make([]workerstore.LaneCursor, lanes)
	all := make([]int, lanes)
	for l := range cursors {
		cursors[l], all[l] = workerstore.NewLaneCursor(l), l
	}
	token := uuid.MustParse(benchToken)
	for range perLane * 9 / 10 / benchBatch {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		st, _ := s.With(tx)
		if _, err := st.AcquireLaneLeasesFor(ctx, all, owners("bench", len(all)), token, time.Minute); err != nil {
			b.Fatal(err)
		}
		rows, reads, err := st.ReadLanes(ctx, nil, cursors, benchBatch)
		if err != nil || len(reads) != lanes {
			b.Fatalf("ReadLanes = %d lanes, %v", len(reads), err)
		}
		ids := make([]uuid.UUID, len(rows))
		for i := range rows {
			ids[i] = rows[i].ID
		}
		if _, err := st.DeleteLaneRows(ctx, ids, token); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		rest := rows
		for i, r := range reads {
			cursors[i] = cursors[i].Advance(r, rest[:r.Rows], r.Rows, time.Time{})
			rest = rest[r.Rows:]
		}
	}
	// Vacuum now rather than while the reads are timed: it removes the dead
	// rows unless the snapshot is held, when it can remove none.
	if _, err := db.ExecContext(ctx, `VACUUM "`+opts.Schema+`"."bloat_outbox"`); err != nil {
		b.Fatal(err)
	}
	return s, db, cursors
}

// BenchmarkLockAndReadLanes is an ordered batch's first round trip in a
// steady stream: the lease lock and the read of ten lanes holding one row
// each, on a pinned connection (pgx's batch; one by one on lib/pq), and, for
// comparison, in a *sql.Tx, where pgx too runs them one by one.
// client-cpu-µs/op is this process's CPU time per lock and read: the
// driver's encoding and decoding, without the server's part.
func BenchmarkLockAndReadLanes(b *testing.B) {
	for _, driver := range testdb.Drivers() {
		b.Run(driver, func(b *testing.B) { benchLockAndReadLanes(b, driver, false) })
		b.Run(driver+"/one-by-one", func(b *testing.B) { benchLockAndReadLanes(b, driver, true) })
	}
}

func benchLockAndReadLanes(b *testing.B, driver string, inTx bool) {
	{
		{
			s, mk := benchSetup(b, driver)
			ctx := context.Background()
			msgs := mk(10)
			lanes := make([]int, len(msgs))
			from := make([]workerstore.LaneCursor, len(msgs))
			for i := range msgs {
				msgs[i].Key, msgs[i].Ordered, msgs[i].Lane = fmt.Sprintf("k%d", i), true, i
				lanes[i], from[i] = i, workerstore.NewLaneCursor(i)
			}
			if err := s.Insert(ctx, msgs); err != nil {
				b.Fatal(err)
			}
			token := uuid.New()
			if _, err := s.AcquireLaneLeasesFor(ctx, lanes, owners("bench", len(lanes)), token, time.Hour); err != nil {
				b.Fatal(err)
			}
			conn, err := testdb.Open(b, driver).Conn(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			var db store.DBTX = conn
			if inTx {
				tx, err := conn.BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer tx.Rollback()
				db = tx
			} else {
				if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
					b.Fatal(err)
				}
				defer conn.ExecContext(ctx, "ROLLBACK")
			}
			st, err := s.With(db)
			if err != nil {
				b.Fatal(err)
			}
			var buf []store.Row
			b.ReportAllocs()
			cpu := proccpu.Self()
			for b.Loop() {
				held, rows, _, err := st.LockAndReadLanes(ctx, lanes, token, 0, buf, from, 100)
				if err != nil || len(held) != len(lanes) || len(rows) != len(msgs) {
					b.Fatalf("LockAndReadLanes = %v, %d rows, %v", held, len(rows), err)
				}
				buf = rows
			}
			b.ReportMetric(float64(proccpu.Self()-cpu)/float64(b.N)/1e3, "client-cpu-µs/op")
		}
	}
}

// owners returns n copies of owner, the owner of each of n lanes.
func owners(owner string, n int) []string {
	o := make([]string, n)
	for i := range o {
		o[i] = owner
	}
	return o
}
