//go:build !linux

package load

import "syscall"

// childAttr: only Linux kills children with their parent.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
