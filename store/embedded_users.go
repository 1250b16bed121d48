package store

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// A private PostgreSQL serves every presenced process started on its data
// folder: `serve`, and the commands run beside it (`demo`, `event create`).
// Each holds a shared lock on the folder itself (flock on the directory:
// no file of ours in it, which initdb wants empty) for as long as it uses
// the server, and the last one to leave stops it, whoever started it.
// The kernel drops the lock of a process that dies, so a server left behind
// by a crash is stopped by the next process that uses it, on its way out.

// joinUsers opens the folder and takes a shared lock on it, waiting while
// the last user stops the server (it holds the lock exclusively meanwhile).
func joinUsers(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("embedded postgres: users lock: %w", err)
	}
	if err := flock(f, syscall.LOCK_SH); err != nil {
		f.Close()
		return nil, fmt.Errorf("embedded postgres: users lock: %w", err)
	}
	return f, nil
}

// lastUser reports whether no other process shares the lock: it tries to
// hold it exclusively without waiting. On false the caller may have lost
// its shared lock (flock converts by unlocking first); it is leaving
// anyway.
func lastUser(f *os.File) bool {
	return flock(f, syscall.LOCK_EX|syscall.LOCK_NB) == nil
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// ReapEmbeddedPostgres stops a private PostgreSQL on dir that no process
// uses any more: the server of a process killed before it could stop it
// (a test binary past its deadline, a SIGKILL) runs on, holding memory
// and a port, until someone reaps it. It reports whether dir is free to
// remove; a folder some process still uses is left alone.
func ReapEmbeddedPostgres(dir string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, fmt.Errorf("reap private postgres: %w", err)
	}
	defer f.Close()
	if !lastUser(f) {
		return false, nil
	}
	pid, ok := postmasterPID(dir)
	if !ok || !processAlive(pid) {
		return true, nil
	}
	// SIGQUIT is PostgreSQL's immediate shutdown: nobody is connected to
	// care about a checkpoint, and the folder is removed next.
	if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
		return false, fmt.Errorf("reap private postgres %d: %w", pid, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			return false, fmt.Errorf("reap private postgres: pid %d still running", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true, nil
}
