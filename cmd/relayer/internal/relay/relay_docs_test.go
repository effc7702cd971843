package relay

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
	"github.com/relayer-go/relayer/dispatch"
)

// The documents this test holds to the relay's code, relative to this
// package's directory.
const (
	relayDocPath    = "../../../../docs/relay.md"
	readmePath      = "../../../../README.md"
	imageScriptPath = "../../../../scripts/image"
)

var (
	// flagToken is a long flag as the documents write it: --name, the name
	// ending at the first character a flag's name cannot hold, such as a
	// space, "=" or a quote.
	flagToken = regexp.MustCompile(`--([a-z][a-z0-9-]*)`)
	// helpFlag is a flag's line in flag.PrintDefaults' output: two spaces, a
	// dash and the flag's name.
	helpFlag = regexp.MustCompile(`^  -([a-z][a-z0-9-]*)`)
	// envToken is an environment variable of the relay's prefix; it ends
	// with a letter or digit, so that "RELAYER_" alone, as a prefix, is no
	// variable.
	envToken = regexp.MustCompile(`RELAYER_[A-Z0-9_]*[A-Z0-9]`)
	// shutdownValue is the value given to --shutdown-timeout, whether as
	// --shutdown-timeout=20s, --shutdown-timeout 20s, or the next item of a
	// YAML list or flow sequence.
	shutdownValue = regexp.MustCompile(`--shutdown-timeout["']?(?:=|[\s,"'\-]+)([0-9][0-9.a-zµ]*)`)
	// graceValue is a Kubernetes pod's grace period, in seconds.
	graceValue = regexp.MustCompile(`terminationGracePeriodSeconds:\s*(\d+)`)
	// migrateLine is a line of a code block that runs relayer migrate, as
	// a command line or a YAML list.
	migrateLine = regexp.MustCompile(`\brelayer"?,?\s+"?migrate\b|\[\s*"migrate"`)
	// scriptFlag is an option scripts/image takes: a pattern of its
	// argument loop's case, such as "    --tag)".
	scriptFlag = regexp.MustCompile(`(?m)^\s+--([a-z][a-z0-9-]*)\)`)
	// stopValue is a systemd unit's stop timeout.
	stopValue = regexp.MustCompile(`(?m)^\s*TimeoutStopSec=(\S+)`)
)

// TestRelayDocsUseRealFlags holds docs/relay.md and the README's relay
// command lines to what `relayer run` really takes: every flag they use is
// one the command defines, every flag it defines is documented, every
// RELAYER_* variable they name is one the relay reads (and every one the
// workers read is documented), and the stop timeouts of the systemd and
// Kubernetes examples leave --shutdown-timeout room to finish. Renaming a
// flag or an option without updating the documents fails it.
//
// It sets environment variables (t.Setenv), so it does not run in
// parallel.
func TestRelayDocsUseRealFlags(t *testing.T) {
	defined := relayFlagNames(t)
	migrateDefined := flagNames(t, "migrate")
	imageDefined := imageFlagNames(t)
	relayDoc := readDoc(t, relayDocPath)
	readme := readDoc(t, readmePath)

	// docs/relay.md: the flags of every fenced code block (its command
	// lines, the YAML args lists and the systemd unit's ExecStart), and of
	// the flag table's rows. Code blocks in this page must use only the
	// relay's long flags (another program's options in short form), but for
	// a line that runs relayer migrate (an init container's command, say)
	// or scripts/image, which is held to theirs.
	used := 0
	for _, b := range fencedBlocks(relayDoc) {
		for i, line := range b.lines {
			switch {
			case migrateLine.MatchString(line):
				checkFlags(t, relayDocPath, b.start+i, line, "migrate", migrateDefined)
				continue
			case strings.Contains(line, "scripts/image "):
				checkFlags(t, relayDocPath, b.start+i, line, "image (scripts/image)", imageDefined)
				continue
			}
			used += checkFlags(t, relayDocPath, b.start+i, line, "run", defined)
		}
	}
	for i, line := range strings.Split(relayDoc, "\n") {
		if strings.HasPrefix(line, "| `--") {
			used += checkFlags(t, relayDocPath, i+1, line, "run", defined)
		}
	}
	// The README discusses every command: only its lines that invoke the
	// relay are held to the relay's flags.
	for i, line := range strings.Split(readme, "\n") {
		if strings.Contains(line, "relayer run") {
			used += checkFlags(t, readmePath, i+1, line, "run", defined)
		}
	}
	if used == 0 {
		t.Errorf("found no flag of relayer run in %s and %s: the test reads nothing", relayDocPath, readmePath)
	}

	// Every flag the command defines is mentioned somewhere in the page,
	// so that a new flag cannot stay undocumented.
	mentioned := map[string]bool{}
	for _, m := range flagToken.FindAllStringSubmatch(relayDoc, -1) {
		mentioned[m[1]] = true
	}
	for _, name := range sortedKeys(defined) {
		if !mentioned[name] {
			t.Errorf("relayer run defines --%s, which %s does not document", name, relayDocPath)
		}
	}

	checkEnvNames(t, relayDoc)
	checkStopTimeouts(t, relayDoc)
}

// relayFlagNames returns the names of the flags `relayer run` defines,
// read from its -h output (flag.PrintDefaults' lines), without a leading
// dash.
func relayFlagNames(t *testing.T) map[string]bool {
	t.Helper()
	names := flagNames(t, "run")
	// Guard against a help format this parser no longer reads, which would
	// make every documented flag look unknown for the wrong reason.
	for _, want := range []string{"transport", "http", "shutdown-timeout"} {
		if !names[want] {
			t.Fatalf("relayer run -h lists no -%s; the help's format changed? flags read: %v", want, sortedKeys(names))
		}
	}
	return names
}

// imageFlagNames returns the options scripts/image takes, read from its
// argument loop, without the leading dashes.
func imageFlagNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, m := range scriptFlag.FindAllStringSubmatch(readDoc(t, imageScriptPath), -1) {
		names[m[1]] = true
	}
	if !names["tag"] {
		t.Fatalf("read no --tag from %s's argument loop: its format changed? read %v", imageScriptPath, sortedKeys(names))
	}
	return names
}

// flagNames returns the names of the flags of `relayer cmd`, read from its
// -h output, without a leading dash.
func flagNames(t *testing.T, cmd string) map[string]bool {
	t.Helper()
	r := runCmd(t, cmd, "-h")
	if r.Code != command.ExitOK {
		t.Fatalf("relayer %s -h: code %d, stderr %q", cmd, r.Code, r.Stderr)
	}
	names := map[string]bool{}
	for _, line := range strings.Split(r.Stderr, "\n") {
		if m := helpFlag.FindStringSubmatch(line); m != nil {
			names[m[1]] = true
		}
	}
	return names
}

// readDoc returns the content of the document at path.
func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkFlags reports each flag on line (line n of the document at path)
// that relayer cmd does not define, and returns how many flags it read.
func checkFlags(t *testing.T, path string, n int, line, cmd string, defined map[string]bool) int {
	t.Helper()
	found := flagToken.FindAllStringSubmatch(line, -1)
	for _, m := range found {
		if !defined[m[1]] {
			t.Errorf("%s:%d: --%s is not a flag of relayer %s (it has %s)\n\t%s", path, n, m[1], cmd, flagList(defined), strings.TrimSpace(line))
		}
	}
	return len(found)
}

// flagList lists the defined flags for an error message.
func flagList(defined map[string]bool) string {
	names := sortedKeys(defined)
	for i, n := range names {
		names[i] = "--" + n
	}
	return strings.Join(names, ", ")
}

// block is one fenced code block of a Markdown document.
type block struct {
	lang  string   // the info string after the opening fence, such as "yaml"
	start int      // the line number of the block's first line of content
	lines []string // the content, fences excluded
}

// fencedBlocks returns the ``` code blocks of a Markdown document.
func fencedBlocks(doc string) []block {
	var blocks []block
	var cur *block
	for i, line := range strings.Split(doc, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &block{lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```")), start: i + 2}
		case cur != nil && trimmed == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, line)
		}
	}
	return blocks
}

// checkEnvNames holds the RELAYER_* names of the page to the relay's code:
// RELAYER_TRANSPORTS and RELAYER_CONSOLE_TOKEN are the relay's own, and
// every other name must be one dispatch.LoadRunnerOptions reads through
// dispatch.EnvSource with the relay's prefix, or dispatch.LoadRetry with
// the prefix RELAYER_RETRY_. Conversely, every key they read must be
// documented. A name the page shows refused as an unknown setting must be
// refused, and RELAYER_TEST_, the prefix of the names the relay leaves
// alone, is no name.
//
// Which names LoadRunnerOptions reads is asked of the code itself, not of a
// list copied from dispatch/config.go, and without duplicating EnvSource's
// naming rule: LoadRunnerOptions is given a Source that records each key
// it asks for and looks it up through the real EnvSource, answering "not
// set" whatever it finds, so that the load never fails. With one
// documented name set to a sentinel value, the name is real if and only
// if one of the keys' lookups returns the sentinel. Setting names to an
// invalid value and expecting an error would miss the string keys (owners
// and names accept any text), and the errors name the key
// ("Recovery.MinAge"), not the variable.
func checkEnvNames(t *testing.T, doc string) {
	t.Helper()
	names := map[string][]int{} // each name, and the lines that mention it
	for i, line := range strings.Split(doc, "\n") {
		for _, name := range envToken.FindAllString(line, -1) {
			switch {
			case name+"_" == notSettingsPrefix:
				// The prefix of the names the relay leaves alone.
			case strings.Contains(line, "unknown setting "+name):
				// A misspelling the page shows refused: it must be.
				if err := checkSettings([]string{name + "=1"}, nil); err == nil || !strings.Contains(err.Error(), "unknown setting "+name) {
					t.Errorf("%s:%d: %s is shown refused, but the relay takes it (%v)", relayDocPath, i+1, name, err)
				}
			default:
				names[name] = append(names[name], i+1)
			}
		}
	}
	if len(names) == 0 {
		t.Errorf("%s names no RELAYER_* variable", relayDocPath)
		return
	}
	env := dispatch.EnvSource(envPrefix)
	retryEnv := dispatch.EnvSource(envPrefix + "RETRY_")
	const sentinel = "relay-docs-test-sentinel"
	// keysOf returns every key LoadRunnerOptions and LoadRetry (the
	// relay's retry policy, its keys here prefixed "Retry.") read, and the
	// one whose variable holds the sentinel, if any.
	keysOf := func() (keys []string, hit string) {
		record := func(prefix string, env dispatch.Source) dispatch.Source {
			return func(key string) (string, bool) {
				keys = append(keys, prefix+key)
				if v, ok := env(key); ok && v == sentinel {
					hit = prefix + key
				}
				return "", false
			}
		}
		if _, err := dispatch.LoadRunnerOptions(record("", env)); err != nil {
			t.Fatalf("dispatch.LoadRunnerOptions with no key set: %v", err)
		}
		if _, err := dispatch.LoadRetry(record("Retry.", retryEnv)); err != nil {
			t.Fatalf("dispatch.LoadRetry with no key set: %v", err)
		}
		return keys, hit
	}
	all, _ := keysOf()
	documented := map[string]bool{}
	for _, name := range sortedKeys(names) {
		switch name {
		case consoleTokenEnv:
			continue // the console's token: the relay reads it by this constant
		case "RELAYER_TRANSPORTS":
			// The relay's transports: check that transportEntries reads
			// them from this variable.
			t.Setenv(name, "docs-probe=nats://127.0.0.1:4222")
			specs, err := transportEntries(nil)
			if err != nil || len(specs) != 1 || specs[0].name != "docs-probe" {
				t.Errorf("%s:%s: %s: transportEntries does not read it (%v)", relayDocPath, lineList(names[name]), name, err)
			}
			continue
		}
		t.Setenv(name, sentinel)
		_, hit := keysOf()
		// Unset it again (t.Setenv restores it only when the test ends), so
		// that the next name's lookup finds only its own sentinel.
		os.Unsetenv(name)
		if hit == "" {
			t.Errorf("%s:%s: %s is read neither by the relay nor by dispatch.LoadRunnerOptions or dispatch.LoadRetry", relayDocPath, lineList(names[name]), name)
			continue
		}
		documented[hit] = true
	}
	for _, key := range all {
		if !documented[key] {
			t.Errorf("the relay reads the key %s, whose %s variable %s does not document", key, envPrefix, relayDocPath)
		}
	}
}

// lineList writes line numbers for an error message: "12,40".
func lineList(lines []int) string {
	s := make([]string, len(lines))
	for i, n := range lines {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// checkStopTimeouts checks that the examples' supervisors wait longer than
// the relay's --shutdown-timeout before they kill it: a Kubernetes pod's
// terminationGracePeriodSeconds in each YAML block, and a systemd unit's
// TimeoutStopSec in each ini block. A block that sets no
// --shutdown-timeout has the flag's default; a pod or unit that sets no
// timeout of its own has its platform's default (30 s and 90 s). At least
// one of each kind must be checked, so that the examples stay.
func checkStopTimeouts(t *testing.T, doc string) {
	t.Helper()
	checkedYAML, checkedINI := 0, 0
	for _, b := range fencedBlocks(doc) {
		text := withoutComments(b.lines)
		timeouts := shutdownTimeouts(t, b, text)
		if len(timeouts) == 0 && !strings.Contains(text, "relayer") {
			continue // not a relay's example
		}
		shutdown := ShutdownTimeoutDefault
		if len(timeouts) > 0 {
			shutdown = maxDuration(timeouts)
		}
		var limit time.Duration
		var what string
		switch b.lang {
		case "yaml":
			m := graceValue.FindStringSubmatch(text)
			switch {
			case m != nil:
				n, _ := strconv.Atoi(m[1])
				limit, what = time.Duration(n)*time.Second, "terminationGracePeriodSeconds: "+m[1]
			case strings.Contains(text, "containers:"):
				limit, what = 30*time.Second, "Kubernetes' default grace period of 30 s"
			default:
				continue // no pod in this block
			}
			checkedYAML++
		case "ini":
			m := stopValue.FindStringSubmatch(text)
			if m == nil {
				limit, what = 90*time.Second, "systemd's default TimeoutStopSec of 90 s"
			} else {
				d, err := systemdSeconds(m[1])
				if err != nil {
					t.Errorf("%s:%d: TimeoutStopSec=%s: %v", relayDocPath, b.start, m[1], err)
					continue
				}
				limit, what = d, "TimeoutStopSec="+m[1]
			}
			checkedINI++
		default:
			continue
		}
		if limit <= shutdown {
			t.Errorf("%s: the %s block at line %d: %s does not exceed --shutdown-timeout %s: the relay would be killed before its workers finish", relayDocPath, b.lang, b.start, what, shutdown)
		}
	}
	if checkedYAML == 0 {
		t.Errorf("%s: no YAML block with a pod of the relay: the Kubernetes example is gone?", relayDocPath)
	}
	if checkedINI == 0 {
		t.Errorf("%s: no ini block running the relay: the systemd example is gone?", relayDocPath)
	}
}

// shutdownTimeouts returns the --shutdown-timeout values given in block b
// (whose text is text), reporting those that do not parse.
func shutdownTimeouts(t *testing.T, b block, text string) []time.Duration {
	t.Helper()
	var out []time.Duration
	for _, m := range shutdownValue.FindAllStringSubmatch(text, -1) {
		d, err := time.ParseDuration(m[1])
		if err != nil || d <= 0 {
			t.Errorf("%s: the %s block at line %d: --shutdown-timeout %q is not a positive duration", relayDocPath, b.lang, b.start, m[1])
			continue
		}
		out = append(out, d)
	}
	if n := strings.Count(text, "--shutdown-timeout"); n != len(out) && n > 0 {
		t.Errorf("%s: the %s block at line %d gives --shutdown-timeout %d times, of which %d with a value this test reads", relayDocPath, b.lang, b.start, n, len(out))
	}
	return out
}

// withoutComments joins lines, leaving out the comment lines of YAML, ini
// files and shells (those starting with "#"), which may name a flag
// without giving it a value.
func withoutComments(lines []string) string {
	var kept []string
	for _, line := range lines {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			kept = append(kept, line)
		}
	}
	return strings.Join(kept, "\n")
}

// maxDuration returns the longest of ds.
func maxDuration(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// systemdSeconds reads a systemd time span as the examples write it: a
// number of seconds, or a span Go's time.ParseDuration reads ("30s").
func systemdSeconds(s string) (time.Duration, error) {
	if n, err := strconv.Atoi(s); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("write it as seconds or as a Go duration such as 30s, for this test to read it")
	}
	return d, nil
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
