//go:build linux

package socket

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// poller is the process's one epoll set of parked WebSocket readers. Each
// socket is registered one-shot: an event disarms it, the woken reader
// reads until the socket is empty and re-arms it. Go's own netpoller keeps
// its registration of the same socket (writes and Read still use it); this
// second set only says when an idle connection has something to read.
type poller struct {
	epfd int
	// wait is the epoll descriptor as Go's netpoller sees it: waiting for
	// events parks a goroutine there instead of holding a thread in
	// epoll_wait, which on a busy machine had to win a processor back
	// before any wake could be handed on.
	wait syscall.RawConn
	file *os.File
	seq  atomic.Uint32

	mu    sync.Mutex
	conns map[int32]*Conn // by fd; an event also carries the Conn's pollSeq
}

// parkEvents: readable, the peer half-closed, and (always reported) errors
// and hang-ups; one-shot, so a connection is never woken twice at once.
const parkEvents = unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT

var (
	pollerOnce sync.Once
	pollerInst *poller
	pollerErr  error
)

// sharedPoller starts the epoll set and its waiting goroutine once per
// process; every Sockets parks its connections there.
func sharedPoller() (*poller, error) {
	pollerOnce.Do(func() {
		fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			pollerErr = fmt.Errorf("epoll_create1: %w", err)
			return
		}
		// An epoll descriptor is itself readable while events are ready,
		// so non-blocking it can wait in Go's netpoller.
		if err := unix.SetNonblock(fd, true); err != nil {
			_ = unix.Close(fd)
			pollerErr = fmt.Errorf("epoll set non-blocking: %w", err)
			return
		}
		f := os.NewFile(uintptr(fd), "websocket-epoll")
		wait, err := f.SyscallConn()
		if err != nil {
			_ = f.Close()
			pollerErr = fmt.Errorf("epoll descriptor: %w", err)
			return
		}
		pollerInst = &poller{epfd: fd, wait: wait, file: f, conns: map[int32]*Conn{}}
		go pollerInst.run()
	})
	return pollerInst, pollerErr
}

func (p *poller) run() {
	events := make([]unix.EpollEvent, 256)
	for {
		var n int
		var werr error
		err := p.wait.Read(func(fd uintptr) bool {
			n, werr = unix.EpollWait(int(fd), events, 0)
			if errors.Is(werr, unix.EINTR) {
				n, werr = 0, nil
				return true
			}
			// Nothing ready: wait in the netpoller until there is.
			return n > 0 || werr != nil
		})
		if err == nil {
			err = werr
		}
		if err != nil {
			panic(fmt.Sprintf("websocket: epoll_wait: %v", err))
		}
		for _, ev := range events[:n] {
			p.dispatch(ev.Fd, uint32(ev.Pad))
		}
	}
}

// dispatch wakes the connection an event is for. A connection closed
// after its event was queued may have left its fd number to a new one:
// the registration's sequence tells them apart.
func (p *poller) dispatch(fd int32, seq uint32) {
	p.mu.Lock()
	c := p.conns[fd]
	p.mu.Unlock()
	if c != nil && c.pollSeq == seq {
		c.wake()
	}
}

// add registers c armed. The socket's descriptor is held open while it is
// used, so a close cannot hand its number to another connection meanwhile.
func (p *poller) add(c *Conn) error {
	c.pollSeq = p.seq.Add(1)
	return p.ctl(c, func(fd int32) error {
		p.mu.Lock()
		p.conns[fd] = c
		p.mu.Unlock()
		ev := unix.EpollEvent{Events: parkEvents, Fd: fd, Pad: int32(c.pollSeq)}
		if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev); err != nil {
			p.mu.Lock()
			delete(p.conns, fd)
			p.mu.Unlock()
			return fmt.Errorf("epoll_ctl add: %w", err)
		}
		return nil
	})
}

// arm re-arms c after its reader emptied the socket. Bytes that arrived
// since wake it at once: epoll checks readiness when it is modified.
func (p *poller) arm(c *Conn) error {
	return p.ctl(c, func(fd int32) error {
		ev := unix.EpollEvent{Events: parkEvents, Fd: fd, Pad: int32(c.pollSeq)}
		if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_MOD, int(fd), &ev); err != nil {
			return fmt.Errorf("epoll_ctl mod: %w", err)
		}
		return nil
	})
}

// remove takes c out of the set; called before its socket is closed.
func (p *poller) remove(c *Conn) {
	_ = p.ctl(c, func(fd int32) error {
		p.mu.Lock()
		if p.conns[fd] == c {
			delete(p.conns, fd)
		}
		p.mu.Unlock()
		return unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	})
}

// ctl runs f with c's descriptor, which stays open while f runs. A closed
// socket is an error and f does not run.
func (p *poller) ctl(c *Conn, f func(fd int32) error) error {
	var ferr error
	if err := c.raw.Control(func(fd uintptr) { ferr = f(int32(fd)) }); err != nil {
		return err
	}
	return ferr
}
