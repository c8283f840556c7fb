package main

import "syscall"

// childAttr kills a child when the benchmark dies.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
