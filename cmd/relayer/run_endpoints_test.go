package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The relay runs its console's sampler for as long as it runs, so that the
// first view of the overview already has a chart (before, the console
// sampled only as pages were served: "Collecting", then a straight line
// between views); and the console's cookie goes to the console only, not
// to /metrics or /readyz.
//
// It sets an environment variable, so it does not run in parallel.
func TestRunConsoleSamplesAndKeepsItsCookie(t *testing.T) {
	dbURL, schema := migrated(t)
	t.Setenv("RELAYER_CONSOLE_TOKEN", "s3cret")
	rr := startRelay(t, "--database-url", dbURL, "--schema", schema, "--transport", "events="+startNATSServer(t),
		"--http", "127.0.0.1:0", "--console")
	// Two samples (5 s apart by default) and some room.
	time.Sleep(12 * time.Second)
	resp, err := noFollow().Get(rr.base + "/console/?token=s3cret")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "relayer_console_token" {
			cookie = c
		}
	}
	if cookie == nil || cookie.Path != "/console/" {
		t.Fatalf("the console's cookie %+v, want one with the path /console/", cookie)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, rr.base+"/console/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.AddCookie(&http.Cookie{Name: cookie.Name, Value: cookie.Value})
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.Contains(string(page), "Collecting") {
		t.Errorf("the first view of the overview, 12 s after the start: %d, still collecting: %v", resp.StatusCode, strings.Contains(string(page), "Collecting"))
	}
	rr.stop(t)
}

// noFollow is a client that returns redirects instead of following them.
func noFollow() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
