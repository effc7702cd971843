package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The deployable links neither the demo's embedded NATS server, nor the
// PostgreSQL installer, nor the benchmark: what runs in production carries
// only what the relay and the operator commands use.
func TestDeployableLinksNoDevelopmentPackages(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 || !slices.Contains(deps, "github.com/relayer-go/relayer/dispatch") {
		t.Fatalf("go list -deps read %d packages, without dispatch: %q", len(deps), out)
	}
	for _, banned := range []string{
		"github.com/nats-io/nats-server/v2",                     // the demo's embedded broker
		"github.com/relayer-go/relayer/internal/tool/pgcluster", // the throwaway PostgreSQL
		"github.com/relayer-go/relayer/internal/tool/bench",     // relayer bench
	} {
		for _, d := range deps {
			if d == banned || strings.HasPrefix(d, banned+"/") {
				t.Errorf("the deployable links %s", d)
			}
		}
	}
}

// readDoc returns the content of the file at path.
func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// withoutComments joins lines, leaving out shell comments.
func withoutComments(lines []string) string {
	var kept []string
	for _, line := range lines {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			kept = append(kept, line)
		}
	}
	return strings.Join(kept, "\n")
}
