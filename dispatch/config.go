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

// EnvSource reads keys from environment variables named prefix plus the field
// name in upper snake case: with prefix "RELAYER_DIRECT_", BatchSize is read
// from RELAYER_DIRECT_BATCH_SIZE.
func EnvSource(prefix string) Source {
	return func(key string) (string, bool) {
		return os.LookupEnv(prefix + snake(key))
	}
}

func snake(key string) string {
	var b strings.Builder
	for i, r := range key {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			b.WriteRune(r)
		} else {
			b.WriteRune(r - 'a' + 'A')
		}
	}
	return b.String()
}

// loader reads typed fields from a Source, keeping the first error.
type loader struct {
	src Source
	err error
}

func (l *loader) int(key string, dst *int) {
	v, ok := l.src(key)
	if !ok || l.err != nil {
		return
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		l.err = fmt.Errorf("%w: %s: %q is not an integer", ErrInvalidOptions, key, v)
		return
	}
	if n <= 0 {
		l.err = fmt.Errorf("%w: %s must be positive, got %d", ErrInvalidOptions, key, n)
		return
	}
	*dst = n
}

func (l *loader) duration(key string, dst *time.Duration) {
	v, ok := l.src(key)
	if !ok || l.err != nil {
		return
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		l.err = fmt.Errorf("%w: %s: %q is not a duration such as \"30s\"", ErrInvalidOptions, key, v)
		return
	}
	if d <= 0 {
		l.err = fmt.Errorf("%w: %s must be positive, got %s", ErrInvalidOptions, key, v)
		return
	}
	*dst = d
}
