//go:build unix && !linux

package pgcluster

import "syscall"

// setDeathSignal does nothing: parent-death signals are Linux-only, so on
// other systems an owner that dies without calling Stop leaves the server
// running.
func setDeathSignal(*syscall.SysProcAttr, syscall.Signal) {}
