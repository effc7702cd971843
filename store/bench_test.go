package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/relayer-go/relayer"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
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

func benchSetup(b *testing.B, driver string) (*store.Store, func(n int) []relayer.Message) {
	db := testdb.Open(b, driver)
	opts := store.Options{Schema: testdb.NewSchema(b), TablePrefix: "bench_"}
	if _, err := store.Migrate(context.Background(), db, opts); err != nil {
		b.Fatal(err)
	}
	s, err := store.New(db, opts)
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
