package load

import "syscall"

// childAttr makes a benchmark's child die with it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
