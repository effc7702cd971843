package relay

import (
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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
	// An absence over a window, not a wait for an event: no page is viewed
	// for two sampling intervals (5 s by default; the chart is drawn from
	// three samples) and 2 s of room, in which the sampler alone takes its
	// samples. The overview is the only sight of them, and it samples too
	// when it is served.
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

// seriesName matches the series an alert expression names (not its
// functions, which are followed by "(", nor its label names).
var seriesName = regexp.MustCompile(`\b((?:relayer|go|process)_[a-z0-9_]+)\b\s*(\(?)`)

// byLabels matches an expression's "by (…)" label lists.
var byLabels = regexp.MustCompile(`by \(([^)]*)\)`)

// alertExpressions returns the expr of every rule of the alerting rules
// docs/relay.md shows (its yaml block holding "groups:").
func alertExpressions(t *testing.T) []string {
	t.Helper()
	var exprs []string
	for _, b := range fencedBlocks(readDoc(t, relayDocPath)) {
		if b.lang != "yaml" || !slices.ContainsFunc(b.lines, func(l string) bool { return strings.TrimSpace(l) == "groups:" }) {
			continue
		}
		for _, l := range b.lines {
			if e, ok := strings.CutPrefix(strings.TrimSpace(l), "expr:"); ok {
				exprs = append(exprs, strings.TrimSpace(e))
			}
		}
	}
	if len(exprs) == 0 {
		t.Fatal("docs/relay.md shows no alerting rules (a yaml block with groups: and expr: lines)")
	}
	return exprs
}

// Every series the alerting rules of docs/relay.md use is on a running
// relay's /metrics with the labels they aggregate by, already at 0 on an
// empty outbox where nothing is wrong; and /metrics carries what
// Prometheus users graph first: the Go runtime's and the process's series,
// the build's version, the service's name, and no scope labels. Before,
// the paused destinations and the dead letters by reason had no series at
// 0, and there was no readiness or build series, no go_* or process_*.
func TestRunMetricsCarryWhatTheDocumentedAlertsUse(t *testing.T) {
	t.Parallel()
	dbURL, schema := migrated(t)
	rr := startRelay(t, "--database-url", dbURL, "--schema", schema, "--transport", "events="+startNATSServer(t), "--http", "127.0.0.1:0")
	rr.waitReadyz(t, 10*time.Second, http.StatusOK, `"ready":true`)
	code, body := get(t, "", rr.base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, body)
	}
	for _, expr := range alertExpressions(t) {
		var labels []string
		for _, m := range byLabels.FindAllStringSubmatch(expr, -1) {
			for _, l := range strings.Split(m[1], ",") {
				labels = append(labels, strings.TrimSpace(l))
			}
		}
		for _, m := range seriesName.FindAllStringSubmatch(byLabels.ReplaceAllString(expr, ""), -1) {
			if m[2] == "(" {
				continue // a function
			}
			f, ok := families[m[1]]
			if !ok || len(f.GetMetric()) == 0 {
				t.Errorf("the alert %q uses %s, which /metrics lacks", expr, m[1])
				continue
			}
			for _, l := range labels {
				if l != "" && !slices.ContainsFunc(f.GetMetric(), func(s *dto.Metric) bool { return hasLabel(s, l, "") }) {
					t.Errorf("the alert %q aggregates %s by %s, a label its series lack", expr, m[1], l)
				}
			}
		}
	}
	value := func(name, label, is string) (float64, bool) {
		for _, s := range families[name].GetMetric() {
			if label == "" || hasLabel(s, label, is) {
				switch {
				case s.GetGauge() != nil:
					return s.GetGauge().GetValue(), true
				case s.GetCounter() != nil:
					return s.GetCounter().GetValue(), true
				}
			}
		}
		return 0, false
	}
	for _, w := range []struct {
		name, label, is string
		want            float64
	}{
		{"relayer_ready", "", "", 1},
		{"relayer_build_info", "version", "(devel)", 1},
		{"relayer_outbox_paused_destinations", "", "", 0},
		{"relayer_outbox_dead_by_reason", "relayer_dead_reason", "permanent", 0},
		{"relayer_outbox_dead_by_reason", "relayer_dead_reason", "exhausted", 0},
		{"relayer_outbox_parked_keys", "", "", 0},
		{"relayer_outbox_oldest_age_seconds", "", "", 0},
		{"target_info", "service_name", "relayer", 1},
	} {
		if got, ok := value(w.name, w.label, w.is); !ok || got != w.want {
			t.Errorf("%s{%s=%q} = %v (present: %v), want %v", w.name, w.label, w.is, got, ok, w.want)
		}
	}
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
		if _, ok := families[name]; !ok {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	for name, f := range families {
		for _, s := range f.GetMetric() {
			if hasLabel(s, "otel_scope_name", "") || hasLabel(s, "otel_scope_version", "") {
				t.Errorf("%s carries scope labels: %v", name, s.GetLabel())
				break
			}
		}
	}
	rr.stop(t)
}

// hasLabel reports whether s has the label name, with the value is unless
// is is "".
func hasLabel(s *dto.Metric, name, is string) bool {
	return slices.ContainsFunc(s.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == name && (is == "" || l.GetValue() == is) })
}
