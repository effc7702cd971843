package pgcluster

import "syscall"

// setDeathSignal makes the kernel send sig to the child when its parent dies
// (see proc.supervise for why the parent's thread matters).
func setDeathSignal(attr *syscall.SysProcAttr, sig syscall.Signal) {
	attr.Pdeathsig = sig
}
