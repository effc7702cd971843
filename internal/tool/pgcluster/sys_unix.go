//go:build unix

package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sigQuit makes postgres perform an immediate shutdown.
var sigQuit os.Signal = syscall.SIGQUIT

// osUser is the OS user initdb and postgres run as. A nil cred means the
// current user.
type osUser struct {
	name string
	cred *syscall.Credential
}

// serverUser picks the OS user to run the server as: the current one, unless
// that is root, which PostgreSQL refuses; then "postgres", else "nobody".
func serverUser() (osUser, error) {
	if os.Geteuid() != 0 {
		return osUser{name: "the current user"}, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		return osUser{name: name, cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}, nil
	}
	return osUser{}, errors.New("running as root, which PostgreSQL refuses, and there is neither a postgres nor a nobody OS user to run it as")
}

// chown gives path to the user, if it is not the current one.
func (u osUser) chown(path string) error {
	if u.cred == nil {
		return nil
	}
	return os.Chown(path, int(u.cred.Uid), int(u.cred.Gid))
}

// sysProcAttr returns the attributes of a child process: run as the user, in
// a process group of its own (so that a terminal's Ctrl-C reaches only the
// owner, which stops the child itself), and, on Linux, receiving deathSig if
// the owner dies.
func (u osUser) sysProcAttr(deathSig syscall.Signal) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true, Credential: u.cred}
	setDeathSignal(attr, deathSig)
	return attr
}

// killGroup kills the process and its process group (it leads one, see
// sysProcAttr).
func killGroup(p *os.Process) {
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	_ = p.Kill()
}

// processAlive reports whether a process exists and is not a zombie. When in
// doubt it says yes.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	// A zombie still exists for kill(2); on Linux, /proc tells them apart.
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z' && stat[i+2] != 'X'
	}
	return true
}

// lockInstall takes a machine-wide lock around the installation of the
// server, waiting for it as long as ctx allows, and returns its release
// function.
func lockInstall(ctx context.Context) (unlock func(), err error) {
	path := filepath.Join(os.TempDir(), "relayer-pgcluster-install.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
