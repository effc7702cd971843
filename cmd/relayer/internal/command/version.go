package command

import (
	"fmt"
	"runtime/debug"
)

// BuildVersion is what "relayer version" reports, from the binary's build
// information: the module versions of the command and of the library it was
// built with (a tag, a pseudo-version, or "(devel)" in a checkout), the
// commit and the Go version.
type BuildVersion struct {
	Command  string `json:"command"`
	Library  string `json:"library"`
	Go       string `json:"go"`
	Commit   string `json:"commit,omitempty"`
	Modified bool   `json:"modified,omitempty"`
}

// ReadVersion reads the binary's build information; false when it has none.
func ReadVersion() (BuildVersion, bool) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return BuildVersion{}, false
	}
	v := BuildVersion{Command: info.Main.Version, Library: "(devel)", Go: info.GoVersion}
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

// VersionInfo is the version as "relayer version" prints it.
func VersionInfo() string {
	v, ok := ReadVersion()
	if !ok {
		return "relayer: no build information"
	}
	return v.String()
}

// String is the version as "relayer version" prints it: scripts/image reads
// the command's version and the commit from it.
func (v BuildVersion) String() string {
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
