//go:build !unix

package pgcluster

import (
	"context"
	"os"
	"syscall"
)

// sigQuit stops the server; without Unix signals it can only be killed.
var sigQuit = os.Kill

// osUser is the OS user the server runs as: always the current one here.
type osUser struct {
	name string
	cred *struct{}
}

func serverUser() (osUser, error) { return osUser{name: "the current user"}, nil }

func (osUser) chown(string) error { return nil }

func (osUser) sysProcAttr(syscall.Signal) *syscall.SysProcAttr { return nil }

func killGroup(p *os.Process) { _ = p.Kill() }

// processAlive says yes, so stale directories are never removed here.
func processAlive(int) bool { return true }

func lockInstall(context.Context) (func(), error) { return func() {}, nil }
