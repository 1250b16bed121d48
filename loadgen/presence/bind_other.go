//go:build !linux

package presence

import "syscall"

func bindNoPort(_, _ string, _ syscall.RawConn) error { return nil }
