package command

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Exit statuses.
const (
	ExitOK    = 0 // the command did what it was asked
	ExitFail  = 1 // the command ran and failed
	ExitUsage = 2 // the command line is wrong
)

// Status is the exit status of a command that failed with err: ExitUsage
// for a [UsageError], ExitFail otherwise.
func Status(err error) int {
	if errors.As(err, new(UsageError)) {
		return ExitUsage
	}
	return ExitFail
}

// Exit returns the exit status of the command name that returned err, and
// reports err on stderr as one line, "relayer NAME: reason", unless it is
// nil, -h's [flag.ErrHelp], or a [LoggedError] the command reported
// already.
func Exit(name string, err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case !errors.As(err, new(LoggedError)):
		fmt.Fprintf(stderr, "relayer %s: %s\n", name, OneLine(err.Error()))
	}
	return Status(err)
}

// LoggedError is an error a command has reported already, as the last line
// of its log: the command exits with its status and prints nothing more.
type LoggedError struct {
	// Err is the error reported.
	Err error
}

// Error returns Err's message.
func (e LoggedError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e LoggedError) Unwrap() error { return e.Err }

// UsageError is a wrong command line: a bad flag value, a missing argument,
// a setting out of range.
type UsageError struct {
	// Msg says what is wrong, naming the flag or setting.
	Msg string
}

// Error returns Msg.
func (e UsageError) Error() string { return e.Msg }

// Usagef returns a [UsageError] whose message is formatted as fmt.Sprintf
// does.
func Usagef(format string, args ...any) error { return UsageError{fmt.Sprintf(format, args...)} }

// OneLine returns s fit for a table cell: runs of white space become one
// space, and whatever a terminal would act on instead of printing (control
// characters such as ESC, other non-printing runes, invalid UTF-8) is written
// as a Go escape such as \x1b, so that a key, a type or an error cannot
// retitle, clear or recolour the operator's terminal.
func OneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !unicode.IsPrint(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}
