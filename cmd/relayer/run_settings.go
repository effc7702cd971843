package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/relayer-go/relayer/dispatch"
)

// notSettingsPrefix starts the environment variables of the repository's
// own tests, such as RELAYER_TEST_DATABASE_URL: a relay a test starts
// inherits them, and they never configure it, so they are left alone.
const notSettingsPrefix = envPrefix + "TEST_"

// relaySettings returns every RELAYER_* variable the relay reads, sorted:
// the keys dispatch.LoadRunnerOptions and dispatch.LoadRetry look up, named
// as dispatch.EnvSource names them, and the relay's own. The loaders are
// asked rather than copied, so that a key dispatch adds is known here at
// once: each gets a Source that notes the variable of every key it looks up
// and answers "not set".
func relaySettings() []string {
	names := []string{transportsEnv, consoleTokenEnv}
	record := func(prefix string) dispatch.Source {
		return func(key string) (string, bool) {
			names = append(names, dispatch.EnvName(prefix, key))
			return "", false
		}
	}
	// With nothing set, neither load can fail.
	_, _ = dispatch.LoadRunnerOptions(record(envPrefix))
	_, _ = dispatch.LoadRetry(record(envPrefix + "RETRY_"))
	slices.Sort(names)
	return slices.Compact(names)
}

// checkSettings refuses the RELAYER_* variables of environ (os.Environ's
// NAME=VALUE entries) that the relay does not read, so that a misspelt
// setting is not silently ignored. The variables the transports name with
// env:VAR are read, and names starting with RELAYER_TEST_ are not
// settings. The error names each unknown variable, never its value, and
// the known name nearest to it when one is close.
func checkSettings(environ []string, specs []transportSpec) error {
	known := relaySettings()
	for _, s := range specs {
		if v, ok := strings.CutPrefix(s.source, "$"); ok {
			known = append(known, v)
		}
	}
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || strings.HasPrefix(name, notSettingsPrefix) || slices.Contains(known, name) {
			continue
		}
		msg := "unknown setting " + name
		if near := nearestName(name, known); near != "" {
			msg += "; did you mean " + near + "?"
		} else {
			msg += ": relayer run reads no such variable"
		}
		unknown = append(unknown, msg)
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	return fmt.Errorf("%s (a RELAYER_* variable is a setting of the relay, unless it starts with %s)", strings.Join(unknown, "; "), notSettingsPrefix)
}

// nearestName returns the name of known closest to name by edit distance,
// or "" when none is close: within a third of name's length after the
// prefix, and at least 2.
func nearestName(name string, known []string) string {
	best, bestDist := "", max(2, len(strings.TrimPrefix(name, envPrefix))/3)+1
	for _, k := range known {
		if d := editDistance(name, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b: the fewest
// insertions, deletions and substitutions of bytes that turn a into b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, sub)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
