package dispatch

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ErrInvalidOptions is returned for options out of range or malformed
// configuration values. The message names the field.
var ErrInvalidOptions = errors.New("dispatch: invalid options")

// Source is a configuration source: it returns the value of a key and whether
// the key is set. [MapSource] and [EnvSource] are the two provided.
type Source func(key string) (string, bool)

// MapSource reads keys from m (for example a section of a configuration file
// decoded into a map). Keys are the option field names, such as "BatchSize".
func MapSource(m map[string]string) Source {
	return func(key string) (string, bool) {
		v, ok := m[key]
		return v, ok
	}
}

// EnvSource reads keys from environment variables named prefix plus the key
// in upper snake case, a dot becoming an underscore: with prefix "RELAYER_",
// Direct.BatchSize is read from RELAYER_DIRECT_BATCH_SIZE and OrderedWorkers
// from RELAYER_ORDERED_WORKERS.
func EnvSource(prefix string) Source {
	return func(key string) (string, bool) {
		return os.LookupEnv(EnvName(prefix, key))
	}
}

// EnvName returns the environment variable [EnvSource] with prefix reads
// key from: EnvName("RELAYER_", "Recovery.MinAge") is
// "RELAYER_RECOVERY_MIN_AGE". A program that reads its options through
// EnvSource can use it to tell its own variables from misspelt ones.
func EnvName(prefix, key string) string {
	return prefix + snake(key)
}

func snake(key string) string {
	var b strings.Builder
	for i, r := range key {
		switch {
		case r == '.':
			b.WriteByte('_')
		case r >= 'A' && r <= 'Z':
			if i > 0 && key[i-1] != '.' {
				b.WriteByte('_')
			}
			b.WriteRune(r)
		default:
			b.WriteRune(r - 'a' + 'A')
		}
	}
	return b.String()
}

// LoadRunnerOptions reads a runner's options from a configuration source.
// The runner's own keys are its field names: DisableDirect,
// DisableRecovery, DisableOrdered, DisableCleanup, Listen and
// RefuseNewerSchema (booleans such as "true" or "1"), OrderedWorkers and
// PoolHeadroom. Each worker's keys are its section and field joined by a
// dot:
//
//   - Direct.QueueCapacity, Direct.BatchSize, Direct.ClaimDuration,
//     Direct.Workers
//   - Recovery.BatchSize, Recovery.PollInterval, Recovery.ClaimDuration,
//     Recovery.LeaseDuration, Recovery.Workers, Recovery.MinAge,
//     Recovery.Owner
//   - Ordered.LeaseDuration, Ordered.PollInterval, Ordered.BatchSize,
//     Ordered.Concurrency, Ordered.Name
//   - Cleanup.InboxRetention, Cleanup.DeadRetention, Cleanup.BatchSize,
//     Cleanup.Interval, Cleanup.LeaseDuration
//
// Durations are Go durations such as "30s". Unset keys keep their
// defaults; malformed values, nonpositive numbers and options out of range
// are errors wrapping [ErrInvalidOptions] that name the key. The Logger is
// not read.
func LoadRunnerOptions(src Source) (RunnerOptions, error) {
	var o RunnerOptions
	l := &loader{src: src}
	l.bool("DisableDirect", &o.DisableDirect)
	l.bool("DisableRecovery", &o.DisableRecovery)
	l.bool("DisableOrdered", &o.DisableOrdered)
	l.bool("DisableCleanup", &o.DisableCleanup)
	l.bool("Listen", &o.Listen)
	l.bool("RefuseNewerSchema", &o.RefuseNewerSchema)
	l.int("OrderedWorkers", &o.OrderedWorkers)
	l.int("PoolHeadroom", &o.PoolHeadroom)
	l.section("Direct.", o.Direct.options())
	l.section("Recovery.", o.Recovery.options())
	l.section("Ordered.", o.Ordered.options())
	l.section("Cleanup.", o.Cleanup.options())
	if l.err != nil {
		return RunnerOptions{}, l.err
	}
	return o, o.Validate()
}

// loader reads typed fields from a Source, keeping the first error.
type loader struct {
	src    Source
	prefix string // of every key read
	err    error
}

// section reads a section's options, each key prefixed with prefix.
func (l *loader) section(prefix string, opts []option) {
	l.prefix = prefix
	loadOptions(l, opts)
	l.prefix = ""
}

// lookup returns the value of key (prefixed) and its full name, or false
// when it is unset or an error was met before.
func (l *loader) lookup(key string) (v, name string, ok bool) {
	if l.err != nil {
		return "", "", false
	}
	name = l.prefix + key
	v, ok = l.src(name)
	return v, name, ok
}

func (l *loader) string(key string, dst *string) {
	if v, _, ok := l.lookup(key); ok {
		*dst = strings.TrimSpace(v)
	}
}

func (l *loader) bool(key string, dst *bool) {
	readValue(l, key, dst, `a boolean such as "true"`, func(v string) (bool, bool) {
		b, err := strconv.ParseBool(v)
		return b, err == nil
	})
}

func (l *loader) int(key string, dst *int) {
	readValue(l, key, dst, "a positive integer", func(v string) (int, bool) {
		n, err := strconv.Atoi(v)
		return n, err == nil && n > 0
	})
}

func (l *loader) duration(key string, dst *time.Duration) {
	readValue(l, key, dst, `a positive duration such as "30s"`, func(v string) (time.Duration, bool) {
		d, err := time.ParseDuration(v)
		return d, err == nil && d > 0
	})
}

// readValue reads key into dst with parse, which reports whether the value
// (spaces trimmed) is valid; want says what a valid value looks like.
func readValue[T any](l *loader, key string, dst *T, want string, parse func(string) (T, bool)) {
	v, name, ok := l.lookup(key)
	if !ok {
		return
	}
	x, ok := parse(strings.TrimSpace(v))
	if !ok {
		l.err = fmt.Errorf("%w: %s: %q is not %s", ErrInvalidOptions, name, v, want)
		return
	}
	*dst = x
}
