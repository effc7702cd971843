package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/relayer-go/relayer/cmd/relayer/internal/command"
)

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := command.NewFlagSet("version", "Print the version of the command and of the library it was built with, and the commit.", "relayer version --json", stderr)
	asJSON := fs.Bool("json", false, "print one JSON object: command, library, go, commit, modified")
	if err := command.Parse(fs, args); err != nil {
		return err
	}
	if !*asJSON {
		fmt.Fprintln(stdout, command.VersionInfo())
		return nil
	}
	v, ok := command.ReadVersion()
	if !ok {
		return errors.New("no build information")
	}
	return command.NewJSONEncoder(stdout).Encode(v)
}
