package relay

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
)

// logFinal reports err, the relay's final error, as the last line of its
// log when the log is JSON, and returns it marked as reported, for run to
// exit with its status without printing it again. Under the text format
// it returns err as it is: run prints it as one line, like every other
// command's.
func logFinal(logger *slog.Logger, format string, err error) error {
	if err == nil || format != "json" || errors.As(err, new(command.LoggedError)) {
		return err
	}
	logger.Error("relayer run: exiting", slog.String("error", command.OneLine(err.Error())), slog.Int("exit_status", command.Status(err)))
	return command.LoggedError{Err: err}
}

// printFinal writes err as the relay's last line, for an exit that does
// not return through run: a JSON log line under the json format, and under
// text the line run would print.
func printFinal(logger *slog.Logger, format string, stderr io.Writer, err error) {
	if format == "json" {
		logFinal(logger, format, err)
		return
	}
	fmt.Fprintf(stderr, "relayer run: %s\n", command.OneLine(err.Error()))
}

// distinct returns err with each distinct message of the errors it joins
// said once: the workers a deadline cut short each report the same
// context error, which would otherwise repeat in the final line.
func distinct(err error) error {
	var leaves []error
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		if e != nil {
			leaves = append(leaves, e)
		}
	}
	walk(err)
	if len(leaves) < 2 {
		return err
	}
	return distinctErrors(leaves)
}

// distinctErrors is a join of errors whose message names each distinct
// message once, in order; errors.Is and errors.As see every one.
type distinctErrors []error

func (d distinctErrors) Error() string {
	var msgs []string
	for _, e := range d {
		if m := e.Error(); !slices.Contains(msgs, m) {
			msgs = append(msgs, m)
		}
	}
	return strings.Join(msgs, "; ")
}

func (d distinctErrors) Unwrap() []error { return d }
