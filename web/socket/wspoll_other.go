//go:build !linux

package socket

import "errors"

// poller parks idle readers on Linux only; elsewhere every connection has
// a reading goroutine.
type poller struct{}

func sharedPoller() (*poller, error) {
	return nil, errors.New("parking idle readers needs epoll (Linux)")
}

func (p *poller) add(*Conn) error        { return errors.ErrUnsupported }
func (p *poller) arm(*Conn) error        { return errors.ErrUnsupported }
func (p *poller) remove(*Conn)           {}
func (p *poller) dispatch(int32, uint32) {}
