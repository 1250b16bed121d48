package web

import "time"

// sweep pings the process's WebSockets every ping_interval and drops those
// silent for pong_timeout: one goroutine and one pass over the live
// connections per tick instead of a timer and a read deadline per
// connection. It ends once CloseAll has closed every connection.
func (s *Sockets) sweep() {
	every := min(s.cfg.PingInterval, s.cfg.PongTimeout) / 8
	every = max(min(every, time.Second), 5*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	var silent, ping []*Conn
	for {
		select {
		case <-t.C:
		case <-s.allDone:
			return
		}
		now := time.Now().UnixNano()
		silent, ping = silent[:0], ping[:0]
		s.mu.Lock()
		for d := range s.live {
			c, ok := d.(*Conn)
			if !ok {
				continue
			}
			switch {
			case now-c.lastRead.Load() > int64(s.cfg.PongTimeout):
				silent = append(silent, c)
			case now >= c.nextPing.Load():
				c.nextPing.Store(now + int64(s.cfg.PingInterval))
				ping = append(ping, c)
			}
		}
		s.mu.Unlock()
		for _, c := range silent {
			c.closeNow(closeAbnormal, "")
		}
		for _, c := range ping {
			// A ping waits behind a write in progress: not on this loop.
			go c.sendPing()
		}
		clear(silent)
		clear(ping)
	}
}
