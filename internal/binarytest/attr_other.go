//go:build !linux

package binarytest

import "syscall"

// sysProcAttr is nil where there is no parent-death signal.
func sysProcAttr() *syscall.SysProcAttr { return nil }
