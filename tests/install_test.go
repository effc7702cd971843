package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// installVersion is the release candidate's version, new for each run:
// the module cache keeps what it fetched by version.
var installVersion = "v0.99.0-installtest." + time.Now().UTC().Format("20060102150405")

// publishedModules are the directories of the published modules, and the
// package of each that a user's program imports.
var publishedModules = []struct{ dir, pkg string }{
	{".", "github.com/relayer-go/relayer/dispatch"},
	{"enlist/bun", ""}, {"enlist/gorm", ""}, {"enlist/pgx", ""}, {"enlist/sqlx", ""},
	{"transport/amqp", ""}, {"transport/kafka", ""}, {"transport/nats", ""},
	{"otel", ""},
}

// testOnly are modules that only the project's tests use: no published
// module may require them, or every service that gets it would inherit
// them.
var testOnly = []string{
	"github.com/lib/pq", "github.com/nats-io/nats-server/v2", "github.com/twmb/franz-go/pkg/kfake",
	"go.uber.org/goleak", "go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/sdk/metric",
}

// olderService is a service on go 1.25 with older releases of the
// libraries Relayer builds on; needs lists, per published module, the
// upgrades that module cannot do without.
var olderService = struct {
	goLine   string
	requires []string
	needs    map[string]map[string]string
}{
	goLine: "1.25.0",
	requires: []string{
		"github.com/jackc/pgx/v5@v5.7.1",
		"gorm.io/gorm@v1.25.7", "gorm.io/driver/postgres@v1.5.7",
		"github.com/uptrace/bun@v1.2.5", "github.com/uptrace/bun/dialect/pgdialect@v1.2.5",
		"github.com/jmoiron/sqlx@v1.3.5",
		"go.opentelemetry.io/otel@v1.35.0", "go.opentelemetry.io/otel/trace@v1.35.0", "go.opentelemetry.io/otel/metric@v1.35.0",
		// The brokers' clients, at the oldest releases the transports
		// support: getting a transport (or anything else) moves none.
		"github.com/nats-io/nats.go@v1.41.2", "github.com/twmb/franz-go@v1.19.5", "github.com/rabbitmq/amqp091-go@v1.8.1",
	},
	needs: map[string]map[string]string{
		// db.RunInTx hands its callback the transaction's context, which
		// carries the outbox state, from bun v1.3.0 on.
		"github.com/relayer-go/relayer/enlist/bun": {
			"github.com/uptrace/bun": "v1.3.0", "github.com/uptrace/bun/dialect/pgdialect": "v1.3.0",
		},
	},
}

// Every published module can be fetched alone, as a user's `go get` would,
// from a release candidate of the current commit: scripts/release commits
// and tags it in a repository of its own, each module is zipped from its
// tag into a module proxy on disk, and then, in a fresh module that sees only that
// proxy and the usual one, each module is got alone and a program importing
// it is built, and the command is installed with `go install …@version` and
// runs `relayer version`.
func TestInstallFromReleaseCandidate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every module from a module proxy")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	tree := releasedTree(t, root)
	changelog, err := os.ReadFile(filepath.Join(tree, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "\n## " + installVersion + " (" + time.Now().UTC().Format("2006-01-02") + ")\n"; !strings.Contains(string(changelog), want) ||
		strings.Contains(string(changelog), "\n## Unreleased\n") {
		t.Errorf("the release's changelog has no section %q, or still an Unreleased one", strings.TrimSpace(want))
	}

	proxy := t.TempDir()
	for _, m := range append(publishedModules, struct{ dir, pkg string }{"cmd/relayer", ""}) {
		dir := filepath.Join(tree, m.dir)
		path := modulePath(t, dir)
		zipModule(t, proxy, dir, path)
	}

	gopath := t.TempDir()
	modcache := strings.TrimSpace(run(t, root, nil, "go", "env", "GOMODCACHE"))
	t.Cleanup(func() { forgetVersion(modcache, installVersion) })
	upstream := strings.TrimSpace(run(t, root, nil, "go", "env", "GOPROXY"))
	env := []string{
		"GOWORK=off", "GOFLAGS=-mod=mod", "GONOSUMDB=github.com/relayer-go/relayer", "GONOSUMCHECK=github.com/relayer-go/relayer",
		"GOPROXY=file://" + filepath.ToSlash(proxy) + "," + upstream,
		// The usual module cache, where the project's own modules were
		// never put: only the proxy above has them.
		"GOMODCACHE=" + modcache,
	}
	for _, m := range publishedModules {
		path := modulePath(t, filepath.Join(tree, m.dir))
		pkg := m.pkg
		if pkg == "" {
			pkg = path
		}
		t.Run(strings.TrimPrefix(path, "github.com/relayer-go/"), func(t *testing.T) {
			user := t.TempDir()
			run(t, user, env, "go", "mod", "init", "example.com/service")
			run(t, user, env, "go", "get", path+"@"+installVersion)
			main := "package main\n\nimport _ \"" + pkg + "\"\n\nfunc main() {}\n"
			if err := os.WriteFile(filepath.Join(user, "main.go"), []byte(main), 0o644); err != nil {
				t.Fatal(err)
			}
			run(t, user, env, "go", "build", "-o", os.DevNull, ".")
			req := run(t, user, env, "go", "list", "-m", "all")
			graph := run(t, user, env, "go", "mod", "graph")
			t.Logf("a service that gets %s: %d modules in its build list (go list -m all), %d in its module graph (go mod graph), besides itself",
				path, len(strings.Fields(strings.ReplaceAll(req, " ", "")))-1, graphSize(graph))
			for _, line := range strings.Split(graph, "\n") {
				from, to, ok := strings.Cut(line, " ")
				dep, _, _ := strings.Cut(to, "@")
				if ok && strings.HasPrefix(from, "github.com/relayer-go/relayer") && slices.Contains(testOnly, dep) {
					t.Errorf("%s requires %s, which only tests use", from, to)
				}
			}
			for _, line := range strings.Split(req, "\n") {
				if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[0], "github.com/relayer-go/relayer") && f[1] != installVersion {
					t.Errorf("%s pulled %s", path, line)
				}
			}
		})
	}
	// A service on go 1.25 and older releases of the libraries it shares
	// with Relayer keeps them: getting any one module upgrades nothing but
	// what that module cannot work without (see the README's "Versions").
	for _, m := range publishedModules {
		path := modulePath(t, filepath.Join(tree, m.dir))
		t.Run("older service/"+strings.TrimPrefix(path, "github.com/relayer-go/"), func(t *testing.T) {
			user := t.TempDir()
			run(t, user, env, "go", "mod", "init", "example.com/service")
			args := []string{"mod", "edit", "-go=" + olderService.goLine}
			for _, r := range olderService.requires {
				args = append(args, "-require="+r)
			}
			run(t, user, env, "go", args...)
			run(t, user, env, "go", "mod", "download")
			run(t, user, env, "go", "get", path+"@"+installVersion)
			var mod struct {
				Go        string
				Toolchain string
				Require   []struct{ Path, Version string }
			}
			if err := json.Unmarshal([]byte(run(t, user, env, "go", "mod", "edit", "-json")), &mod); err != nil {
				t.Fatal(err)
			}
			if mod.Go != olderService.goLine || mod.Toolchain != "" {
				t.Errorf("getting %s moved the service to go %s (toolchain %q), want go %s", path, mod.Go, mod.Toolchain, olderService.goLine)
			}
			for _, r := range olderService.requires {
				p, v, _ := strings.Cut(r, "@")
				got := strings.Fields(run(t, user, env, "go", "list", "-m", p))
				if len(got) != 2 {
					t.Fatalf("go list -m %s: %q", p, got)
				}
				if got[1] != v && olderService.needs[path][p] != got[1] {
					t.Errorf("getting %s upgraded %s from %s to %s", path, p, v, got[1])
				}
			}
		})
	}
	t.Run("cmd/relayer", func(t *testing.T) {
		bin := t.TempDir()
		run(t, t.TempDir(), append(env, "GOBIN="+bin, "GOPATH="+gopath), "go", "install", "github.com/relayer-go/relayer/cmd/relayer@"+installVersion)
		out := run(t, bin, nil, filepath.Join(bin, "relayer"), "version")
		if !strings.Contains(out, "relayer "+installVersion) || !strings.Contains(out, "library "+installVersion) {
			t.Errorf("relayer version printed %q, want the command and library at %s", out, installVersion)
		}
	})
}

// graphSize counts the distinct modules other than the main module in the
// output of go mod graph.
func graphSize(graph string) int {
	seen := map[string]bool{}
	for _, line := range strings.Split(graph, "\n") {
		for _, node := range strings.Fields(line) {
			if strings.Contains(node, "@") {
				seen[node] = true
			}
		}
	}
	return len(seen)
}

// run runs a command in dir with env added, and returns its output; it
// fails the test when the command fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// releasedTree releases root's committed tree as a maintainer does and
// returns what its tags hold: the HEAD commit is put in a repository of
// its own, where scripts/release commits and tags installVersion; every
// module's tag must name that commit, whose files are then written to a
// new directory, from the tag, as `go get` fetches them. Uncommitted
// changes of root are not in it.
func releasedTree(t *testing.T, root string) string {
	t.Helper()
	repo := t.TempDir()
	archive := filepath.Join(t.TempDir(), "head.tar")
	run(t, root, nil, "git", "archive", "--format=tar", "-o", archive, "HEAD")
	run(t, repo, nil, "tar", "-xf", archive)
	git := []string{"GIT_AUTHOR_NAME=install test", "GIT_AUTHOR_EMAIL=install@test.invalid",
		"GIT_COMMITTER_NAME=install test", "GIT_COMMITTER_EMAIL=install@test.invalid"}
	run(t, repo, git, "git", "init", "-q")
	run(t, repo, git, "git", "add", "-A")
	run(t, repo, git, "git", "commit", "-qm", "HEAD of the checkout")
	run(t, repo, git, "scripts/release", installVersion)

	released := strings.TrimSpace(run(t, repo, nil, "git", "rev-parse", "HEAD"))
	for _, m := range append(publishedModules, struct{ dir, pkg string }{"cmd/relayer", ""}) {
		tag := installVersion
		if m.dir != "." {
			tag = m.dir + "/" + installVersion
		}
		if got := strings.TrimSpace(run(t, repo, nil, "git", "rev-list", "-n", "1", tag)); got != released {
			t.Fatalf("tag %s names %s, not the release commit %s", tag, got, released)
		}
	}
	tree := t.TempDir()
	tagged := filepath.Join(t.TempDir(), "tagged.tar")
	run(t, repo, nil, "git", "archive", "--format=tar", "-o", tagged, installVersion)
	run(t, tree, nil, "tar", "-xf", tagged)
	return tree
}

// modulePath reads the module path of the go.mod in dir.
func modulePath(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "module "); ok {
			return strings.TrimSpace(rest)
		}
	}
	t.Fatalf("%s/go.mod names no module", dir)
	return ""
}

// zipModule writes the module in dir at installVersion into the module
// proxy directory proxy: its .info, .mod and .zip, and its version list.
func zipModule(t *testing.T, proxy, dir, path string) {
	t.Helper()
	escaped, err := module.EscapePath(path)
	if err != nil {
		t.Fatal(err)
	}
	at := filepath.Join(proxy, escaped, "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	info, _ := json.Marshal(map[string]any{"Version": installVersion, "Time": time.Now().UTC().Format(time.RFC3339)})
	for name, data := range map[string][]byte{installVersion + ".mod": mod, installVersion + ".info": info, "list": []byte(installVersion + "\n")} {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Create(filepath.Join(at, installVersion+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := zip.CreateFromDir(f, module.Version{Path: path, Version: installVersion}, dir); err != nil {
		t.Fatalf("zip %s: %v", path, err)
	}
}

// forgetVersion removes what the module cache keeps of the project's
// modules at version, so that test runs leave nothing behind.
func forgetVersion(modcache, version string) {
	for _, pattern := range []string{
		filepath.Join(modcache, "github.com", "relayer-go", "relayer*@"+version),
		filepath.Join(modcache, "github.com", "relayer-go", "relayer*", "*@"+version),
		filepath.Join(modcache, "github.com", "relayer-go", "relayer*", "*", "*@"+version),
		filepath.Join(modcache, "cache", "download", "github.com", "relayer-go", "relayer", "@v", version+".*"),
		filepath.Join(modcache, "cache", "download", "github.com", "relayer-go", "relayer", "*", "@v", version+".*"),
		filepath.Join(modcache, "cache", "download", "github.com", "relayer-go", "relayer", "*", "*", "@v", version+".*"),
	} {
		matches, _ := filepath.Glob(pattern)
		for _, m := range matches {
			filepath.WalkDir(m, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					os.Chmod(p, 0o755) // the module cache makes its directories read-only
				}
				return nil
			})
			os.RemoveAll(m)
		}
	}
}
