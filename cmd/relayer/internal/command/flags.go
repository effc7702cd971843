package command

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// NewFlagSet returns a flag set whose -h prints the summary, an example and
// the flags. Parse errors are returned, not printed twice.
func NewFlagSet(name, summary, example string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("relayer "+name, flag.ContinueOnError)
	fs.SetOutput(stderr) // its Output is where the command warns (see ParseArgs)
	fs.Usage = func() {
		fs.SetOutput(stderr)
		fmt.Fprintf(stderr, "usage: relayer %s [flags]\n\n%s\n\nexample:\n  %s\n\nflags:\n", name, summary, example)
		fs.PrintDefaults()
	}
	return fs
}

// Parse parses args and turns flag errors into usage errors; -h returns
// flag.ErrHelp. Positional arguments are refused.
func Parse(fs *flag.FlagSet, args []string) error {
	rest, err := ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return Usagef("unexpected argument %q", rest[0])
	}
	return nil
}

// ParseArgs is Parse for commands that take positional arguments: flags may
// come before, between and after them, up to a "--" that ends the flags. It
// returns the positional arguments in order.
func ParseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	// The flag package prints the error and the whole usage on a bad flag; the
	// error is reported once, by Exit, and the usage only on -h.
	help, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	defer func() { fs.Usage = help; fs.SetOutput(out) }()
	var positional []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			help()
			return nil, err
		}
		if err != nil {
			return nil, UsageError{err.Error()}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}
