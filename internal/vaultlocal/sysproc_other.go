//go:build !linux

package vaultlocal

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
