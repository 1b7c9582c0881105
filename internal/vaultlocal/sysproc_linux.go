package vaultlocal

import "syscall"

// sysProcAttr kills the server with its parent: a test binary that dies
// (a panic, a time-out, SIGKILL) leaves no vault behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
