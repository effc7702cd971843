package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// errNotFound reports that no server binaries were found.
var errNotFound = errors.New("no PostgreSQL server binaries found")

// debianRoot holds one directory per installed server version on Debian and
// Ubuntu (/usr/lib/postgresql/15/bin, ...). A variable for tests.
var debianRoot = "/usr/lib/postgresql"

// server holds the paths of the server binaries Start needs.
type server struct {
	initdb   string
	postgres string
}

// findServer looks for initdb and postgres: first in the directory reported
// by "pg_config --bindir", then in the newest /usr/lib/postgresql/*/bin, then
// on PATH.
func findServer(ctx context.Context) (server, error) {
	var dirs []string
	if pgConfig, err := exec.LookPath("pg_config"); err == nil {
		if out, err := exec.CommandContext(ctx, pgConfig, "--bindir").Output(); err == nil {
			if dir := strings.TrimSpace(string(out)); dir != "" {
				dirs = append(dirs, dir)
			}
		}
	}
	dirs = append(dirs, debianBinDirs()...)
	for _, dir := range dirs {
		srv := server{initdb: filepath.Join(dir, "initdb"), postgres: filepath.Join(dir, "postgres")}
		if isExecutable(srv.initdb) && isExecutable(srv.postgres) {
			return srv, nil
		}
	}
	initdb, err1 := exec.LookPath("initdb")
	postgres, err2 := exec.LookPath("postgres")
	if err1 == nil && err2 == nil {
		return server{initdb: initdb, postgres: postgres}, nil
	}
	if err := ctx.Err(); err != nil {
		return server{}, err
	}
	return server{}, errNotFound
}

// debianBinDirs returns the bin directories under debianRoot, newest version
// first.
func debianBinDirs() []string {
	matches, _ := filepath.Glob(filepath.Join(debianRoot, "*", "bin"))
	slices.SortFunc(matches, func(a, b string) int {
		return -compareVersions(filepath.Base(filepath.Dir(a)), filepath.Base(filepath.Dir(b)))
	})
	return matches
}

// compareVersions compares dotted version numbers such as "9.6" and "15"
// numerically, falling back to string order for anything else.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		x, errX := strconv.Atoi(as[i])
		y, errY := strconv.Atoi(bs[i])
		if errX != nil || errY != nil {
			return strings.Compare(a, b)
		}
		if x != y {
			return x - y
		}
	}
	return len(as) - len(bs)
}

func isExecutable(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular() && info.Mode().Perm()&0o111 != 0
}

// install installs Debian's postgresql package with apt-get and returns the
// binaries it provides. Concurrent callers (test binaries of several packages
// run in parallel by go test) are serialised with a lock file, and whoever
// comes second finds the binaries already installed.
func install(ctx context.Context, logf func(string, ...any)) (server, error) {
	if os.Geteuid() != 0 {
		return server{}, fmt.Errorf("%w (not installing it automatically: not running as root)", ErrNoServer)
	}
	aptGet, err := exec.LookPath("apt-get")
	if err != nil {
		return server{}, fmt.Errorf("%w (not installing it automatically: apt-get not found)", ErrNoServer)
	}
	unlock, err := lockInstall(ctx)
	if err != nil {
		return server{}, fmt.Errorf("%w (waiting for the installation lock: %w)", ErrNoServer, err)
	}
	defer unlock()
	if srv, err := findServer(ctx); err == nil {
		return srv, nil
	}

	logf("no PostgreSQL server binaries found; installing Debian's postgresql package with apt-get (this can take a few minutes)")
	steps := [][]string{
		{"update"},
		{"install", "-y", "-o", "DPkg::Lock::Timeout=600", "postgresql"},
	}
	for _, args := range steps {
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, aptGet, args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout = &out
		cmd.Stderr = &out
		if err := cmd.Run(); err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				err = ctxErr
			}
			return server{}, fmt.Errorf("%w (apt-get %s failed: %w)\n%s", ErrNoServer, strings.Join(args, " "), err, tail(out.String()))
		}
	}
	srv, err := findServer(ctx)
	if err != nil {
		return server{}, fmt.Errorf("%w (the postgresql package was installed, but its binaries were not found in %s/*/bin)", ErrNoServer, debianRoot)
	}
	logf("installed PostgreSQL")
	return srv, nil
}
