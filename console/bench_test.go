package console_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"

	"github.com/relayer-go/relayer/console"
	"github.com/relayer-go/relayer/headers"
	"github.com/relayer-go/relayer/internal/testkit/testdb"
	"github.com/relayer-go/relayer/store"
)

// benchRows is the outbox size of BenchmarkPages: RELAYER_CONSOLE_BENCH_ROWS,
// default 1,000,000.
func benchRows() int {
	if n, err := strconv.Atoi(os.Getenv("RELAYER_CONSOLE_BENCH_ROWS")); err == nil && n > 0 {
		return n
	}
	return 1_000_000
}

// seedMillion fills a new outbox with n rows in one statement: 256-byte
// bodies over 10 destinations, a third of them ordered over 10,000 keys, 1%
// scheduled, 1% waiting for a retry, 100 parked keys, and 10,000 dead
// letters; then it analyzes the tables, as autovacuum would.
func seedMillion(b *testing.B, db *sql.DB, opts store.Tables, n int) {
	b.Helper()
	ctx := context.Background()
	hdr, err := headers.Encode([]headers.Header{{Name: "content-type", Value: []byte("application/json")}})
	if err != nil {
		b.Fatal(err)
	}
	outbox := fmt.Sprintf(`"%s"."%soutbox"`, opts.Schema, opts.TablePrefix)
	dead := fmt.Sprintf(`"%s"."%sdead"`, opts.Schema, opts.TablePrefix)
	stmts := []string{
		`INSERT INTO ` + outbox + ` (id, message_type, transport, destination, body, headers, ordering_key, lane,
			created_at, deliver_at, attempts, last_error, retry_at, parked_at)
		SELECT gen_random_uuid(), 'orders.Placed', 'nats', 'orders.dest-' || (i % 10), convert_to(repeat('x', 256), 'UTF8'), $1,
			CASE WHEN i % 3 = 0 THEN 'customer-' || (i % 10000) END,
			CASE WHEN i % 3 = 0 THEN (i % 10000) % 32 END,
			now() - (i % 3600) * interval '1 second',
			CASE WHEN i % 100 = 1 THEN now() + interval '1 hour' END,
			CASE WHEN i % 100 = 2 THEN 3 ELSE 0 END,
			CASE WHEN i % 100 = 2 THEN 'broker said no' END,
			CASE WHEN i % 100 = 2 THEN now() + interval '10 minutes' END,
			CASE WHEN i % 3 = 0 AND i < 300 THEN now() END
		FROM generate_series(1, $2) AS i`,
		`INSERT INTO ` + dead + ` (id, message_type, transport, destination, body, headers, created_at, attempts, last_error, reason)
		SELECT gen_random_uuid(), 'orders.Placed', 'nats', 'orders.dest-' || (i % 10), convert_to(repeat('x', 256), 'UTF8'), $1,
			now() - interval '1 day', 10, 'gave up', CASE WHEN i % 2 = 0 THEN 'exhausted' ELSE 'permanent' END
		FROM generate_series(1, $2 / 100) AS i`,
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s, hdr, n); err != nil {
			b.Fatal(err)
		}
	}
	for _, t := range []string{outbox, dead} {
		if _, err := db.ExecContext(ctx, `VACUUM ANALYZE `+t); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPages renders each console page of an outbox of a million rows
// (RELAYER_CONSOLE_BENCH_ROWS): ns/op is one page, as a browser would load
// it.
//
//	go test -run '^$' -bench BenchmarkPages -benchtime 20x ./console/
func BenchmarkPages(b *testing.B) {
	db := testdb.Open(b, "pgx")
	opts := store.Tables{Schema: testdb.NewSchema(b)}
	if _, err := store.Migrate(context.Background(), db, opts); err != nil {
		b.Fatal(err)
	}
	seedMillion(b, db, opts, benchRows())
	c, err := console.New(db, opts, console.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(c)
	defer srv.Close()
	for _, page := range []string{"", "lanes", "parked", "dead"} {
		b.Run("page="+page, func(b *testing.B) {
			for b.Loop() {
				resp, err := http.Get(srv.URL + "/" + page)
				if err != nil {
					b.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("GET /%s: %d\n%.2000s", page, resp.StatusCode, body)
				}
			}
		})
	}
}
