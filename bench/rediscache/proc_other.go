//go:build !linux

package main

import "syscall"

// childAttr: only Linux kills children with their parent.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
