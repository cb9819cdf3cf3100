package binarytest

import "syscall"

// sysProcAttr makes the child die with the process that started it: a
// product binary must not outlive a test binary or a harness that died.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
