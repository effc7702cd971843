package testdb

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// recordTB records how URL gives up, ending its goroutine as testing.T does.
type recordTB struct {
	testing.TB
	skipped, failed string
}

func (r *recordTB) Helper() {}

func (r *recordTB) Skip(args ...any) {
	r.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}

func (r *recordTB) Fatal(args ...any) {
	r.failed = fmt.Sprint(args...)
	runtime.Goexit()
}

// callURL calls URL with a recordTB on a goroutine of its own.
func callURL(t *testing.T) (*recordTB, string) {
	r := &recordTB{TB: t}
	var got string
	done := make(chan struct{})
	go func() {
		defer close(done)
		got = URL(r)
	}()
	<-done
	return r, got
}

// withoutDatabase pretends that Main could not get a database.
func withoutDatabase(t *testing.T, reason string) {
	savedURL, savedReason := baseURL, unavailable
	baseURL, unavailable = "", reason
	t.Cleanup(func() { baseURL, unavailable = savedURL, savedReason })
}

func TestUnavailableSkips(t *testing.T) {
	withoutDatabase(t, "no test database: because")
	t.Setenv("CI", "")
	r, got := callURL(t)
	if r.skipped != "no test database: because" || r.failed != "" || got != "" {
		t.Errorf("without a database outside CI: skipped %q, failed %q, URL %q; want a skip with the reason", r.skipped, r.failed, got)
	}
}

func TestUnavailableFailsInCI(t *testing.T) {
	withoutDatabase(t, "no test database: because")
	t.Setenv("CI", "true")
	r, _ := callURL(t)
	if r.skipped != "" || !strings.Contains(r.failed, "because") || !strings.Contains(r.failed, "CI=true") {
		t.Errorf("without a database in CI: skipped %q, failed %q; want a failure with the reason", r.skipped, r.failed)
	}
}

func TestWithoutMain(t *testing.T) {
	withoutDatabase(t, "")
	savedMain := mainCalled
	mainCalled = false
	t.Cleanup(func() { mainCalled = savedMain })
	t.Setenv("CI", "")

	t.Setenv(EnvURL, "postgres://example/db")
	if r, got := callURL(t); got != "postgres://example/db" || r.skipped != "" {
		t.Errorf("without Main but with %s: URL %q, skipped %q", EnvURL, got, r.skipped)
	}
	t.Setenv(EnvURL, "")
	if r, _ := callURL(t); !strings.Contains(r.skipped, "testdb.Main") {
		t.Errorf("without Main or %s: skipped %q, want a hint about testdb.Main", EnvURL, r.skipped)
	}
}

func TestSchemaName(t *testing.T) {
	for name, wantPart := range map[string]string{
		"TestFoo":                  "t_testfoo_",
		"TestFoo/sub_test#01":      "t_testfoo_sub_test_01_",
		"__Weird--Name__":          "t_weird_name_",
		"ü":                        "t_",
		strings.Repeat("abc/", 20): "t_abc_abc_abc_abc_abc_abc_abc_ab_",
	} {
		got := schemaName(name)
		if !strings.HasPrefix(got, wantPart) || len(got) != len(wantPart)+16 {
			t.Errorf("schemaName(%q) = %q, want %q followed by 16 hex digits", name, got, wantPart)
		}
	}
}
