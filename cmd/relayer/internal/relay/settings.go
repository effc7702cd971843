package relay

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/dispatch"
	"github.com/relayer-go/relayer/dispatch/pgxlisten"
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

// relayOptions reads the workers' settings from the environment and sets
// what a relay needs: no direct dispatch (nothing commits in this process),
// recovery taking rows at once, one ordered worker, the wake-up listener.
func relayOptions(name string, logger *slog.Logger) (dispatch.RunnerOptions, error) {
	o, err := dispatch.LoadRunnerOptions(dispatch.EnvSource(envPrefix))
	if err != nil {
		return o, fmt.Errorf("the environment (%s…): %w", envPrefix, err)
	}
	o.DisableDirect = true
	if _, set := os.LookupEnv(envPrefix + "RECOVERY_MIN_AGE"); !set {
		o.Recovery.MinAge = time.Nanosecond
	}
	if o.OrderedWorkers == 0 {
		o.OrderedWorkers = 1
	}
	if _, set := os.LookupEnv(envPrefix + "LISTEN"); !set {
		o.Listen = true
	}
	if o.Listen {
		o.Notifications = pgxlisten.Waiter{}
	}
	if o.Recovery.Owner == "" {
		o.Recovery.Owner = name
	}
	if o.Ordered.Name == "" {
		o.Ordered.Name = name
	}
	if o.Cleanup.Owner == "" {
		o.Cleanup.Owner = name
	}
	o.Logger = logger
	return o, o.Validate()
}

// newLogger returns the relay's logger: text or JSON on stderr.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, command.Usagef("--log-level %q: want debug, info, warn or error", level)
	}
	ho := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, ho)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, ho)), nil
	}
	return nil, command.Usagef("--log-format %q: want text or json", format)
}
