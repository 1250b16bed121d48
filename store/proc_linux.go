package store

import "syscall"

// childProcAttr makes a development child die with this process, even when
// this process is killed without a chance to stop it.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
}
