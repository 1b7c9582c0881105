package procs

import "syscall"

// sysProcAttr puts the child in a process group of its own and kills it
// when the supervisor dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
