package apicompat

import (
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestAPICompatibility runs the check through its command, so that the
// type-checking of both trees runs without the race detector (three times
// faster): see Check for what it holds the API to.
func TestAPICompatibility(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks every published package twice")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "github.com/relayer-go/relayer/tests/cmd/apicompat", "-root", root, "-v")
	cmd.Dir = filepath.Join(root, "tests")
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the API check failed: %v", err)
	}
}

func TestAnnounced(t *testing.T) {
	changelog := `# Changelog

## Unreleased

### Added
- store: ` + "`Renew`" + ` takes a context (in Added: does not count).

### Changed
- ` + "`relayernats.Consume(ctx, c, js, cons, opts)`" + ` (was another order).
- dispatch's ` + "`…Default`" + ` constants and ` + "`Load…`" + ` functions.

### Removed
- The takes left package ` + "`store`" + `: ` + "`TakeIDs`" + `,
  ` + "`Bury`" + `.

## v0.1.0

### Removed
- store: ` + "`Heartbeat`" + `.
`
	bullets := unreleasedBreakingBullets(changelog)
	for _, tc := range []struct {
		c    change
		want bool
	}{
		{change{pkg: "transport/nats", name: "relayernats", message: "Consume: changed from func() to func(int)"}, true},
		{change{pkg: "transport/kafka", name: "relayerkafka", message: "Consume: changed from func() to func(int)"}, false},
		{change{pkg: "store", name: "store", message: "(*Store).TakeIDs: removed"}, true},
		{change{pkg: "store", name: "store", message: "(*Store).Bury: removed"}, true},
		{change{pkg: "store", name: "store", message: "(*Store).Renew: removed"}, false},
		{change{pkg: "store", name: "store", message: "(*Store).Heartbeat: removed"}, false},
		{change{pkg: "store", name: "store", message: "(*Store).TakeID: removed"}, false},
		{change{pkg: "dispatch", name: "dispatch", message: "BatchSizeDefault: removed"}, true},
		{change{pkg: "dispatch", name: "dispatch", message: "LoadDirectOptions: removed"}, true},
		{change{pkg: "dispatch", name: "dispatch", message: "DefaultThing: removed"}, false},
	} {
		if got := announced(tc.c, bullets); got != tc.want {
			t.Errorf("announced(%s) = %v, want %v (bullets %q)", tc.c, got, tc.want, bullets)
		}
	}
	if want := 3; len(bullets) != want || !slices.ContainsFunc(bullets, func(b string) bool { return containsWord(b, "Bury") }) {
		t.Errorf("bullets %q, want %d, the last joined across its lines", bullets, want)
	}
}
