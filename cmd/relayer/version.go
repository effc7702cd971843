package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
)

// versionInfo describes the binary from its build information: the module
// versions of the command and of the library it was built with (a tag, a
// pseudo-version, or "(devel)" in a checkout), the commit and the Go version.
func versionInfo() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "relayer: no build information"
	}
	core := "(devel)"
	for _, d := range info.Deps {
		if d.Path == "github.com/relayer-go/relayer" {
			core = d.Version
			if d.Replace != nil {
				core += " => " + d.Replace.Path
				if d.Replace.Version != "" {
					core += " " + d.Replace.Version
				}
			}
		}
	}
	s := fmt.Sprintf("relayer %s (library %s, %s)", info.Main.Version, core, info.GoVersion)
	var commit, modified string
	for _, kv := range info.Settings {
		switch kv.Key {
		case "vcs.revision":
			commit = kv.Value
		case "vcs.modified":
			if kv.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if commit != "" {
		s += fmt.Sprintf("\ncommit %s%s", commit, modified)
	}
	return s
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "Print the version of the command and of the library it was built with, and the commit.", "relayer version", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(stdout, versionInfo())
	return nil
}
