package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
)

// buildVersion is what "relayer version" reports, from the binary's build
// information: the module versions of the command and of the library it was
// built with (a tag, a pseudo-version, or "(devel)" in a checkout), the
// commit and the Go version.
type buildVersion struct {
	Command  string `json:"command"`
	Library  string `json:"library"`
	Go       string `json:"go"`
	Commit   string `json:"commit,omitempty"`
	Modified bool   `json:"modified,omitempty"`
}

func readVersion() (buildVersion, bool) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return buildVersion{}, false
	}
	v := buildVersion{Command: info.Main.Version, Library: "(devel)", Go: info.GoVersion}
	for _, d := range info.Deps {
		if d.Path == "github.com/relayer-go/relayer" {
			v.Library = d.Version
			if d.Replace != nil {
				v.Library += " => " + d.Replace.Path
				if d.Replace.Version != "" {
					v.Library += " " + d.Replace.Version
				}
			}
		}
	}
	for _, kv := range info.Settings {
		switch kv.Key {
		case "vcs.revision":
			v.Commit = kv.Value
		case "vcs.modified":
			v.Modified = kv.Value == "true"
		}
	}
	return v, true
}

// versionInfo is the version as "relayer version" prints it.
func versionInfo() string {
	v, ok := readVersion()
	if !ok {
		return "relayer: no build information"
	}
	return v.String()
}

// String is the version as "relayer version" prints it: scripts/image reads
// the command's version and the commit from it.
func (v buildVersion) String() string {
	s := fmt.Sprintf("relayer %s (library %s, %s)", v.Command, v.Library, v.Go)
	if v.Commit != "" {
		modified := ""
		if v.Modified {
			modified = ", modified"
		}
		s += fmt.Sprintf("\ncommit %s%s", v.Commit, modified)
	}
	return s
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "Print the version of the command and of the library it was built with, and the commit.", "relayer version --json", stderr)
	asJSON := fs.Bool("json", false, "print one JSON object: command, library, go, commit, modified")
	if err := parse(fs, args); err != nil {
		return err
	}
	if !*asJSON {
		fmt.Fprintln(stdout, versionInfo())
		return nil
	}
	v, ok := readVersion()
	if !ok {
		return errors.New("no build information")
	}
	return newJSONEncoder(stdout).Encode(v)
}
