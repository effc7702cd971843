package health_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/relayer-go/relayer/health"
	"github.com/relayer-go/relayer/store"
)

func ExampleHandler() {
	var db *sql.DB // the application's pool
	st, err := store.New(db, store.Tables{Schema: "messaging", TablePrefix: "orders_"})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/healthz/outbox", health.Handler(st, health.Options{
		MaxBacklog:   10_000,
		MaxOldestAge: time.Minute,
	}))
	_ = http.ListenAndServe(":8080", mux)
}

// What a probe reads when the outbox falls behind.
func ExampleReport() {
	backlog, age := int64(12408), 95.25
	r := health.Report{
		Status:           health.StatusUnhealthy,
		Backlog:          &backlog,
		OldestAgeSeconds: &age,
		Reasons:          []string{"backlog 12408 is above MaxBacklog 10000"},
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
	// Output:
	// {"status":"unhealthy","backlog":12408,"oldest_age_seconds":95.25,"reasons":["backlog 12408 is above MaxBacklog 10000"]}
}
