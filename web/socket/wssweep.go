package socket

import (
	"math/rand/v2"
	"time"
)

// sweep pings the process's WebSockets every ping_interval and drops those
// silent for pong_timeout: one goroutine and one pass over the live
// connections per tick instead of a timer and a read deadline per
// connection. It ends once CloseAll has closed every connection.
//
// Pings are a write per connection: the thousands opened in one burst
// must not all be pinged in the same tick, or deliveries queue behind a
// wall of pings (2,000 of them held the fan-out's deliveries for 30-60
// ms). So the first ping comes at a random point of the second half of
// the interval (firstPing), and ticks are short enough that each pings a
// small share of the connections.
func (s *Sockets) sweep() {
	every := min(s.cfg.PingInterval, s.cfg.PongTimeout) / 100
	every = max(min(every, 250*time.Millisecond), 5*time.Millisecond)
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

// firstPing is how long after opening a connection gets its first ping:
// between half the interval and the interval, spread at random so a burst
// of connections is not pinged all at once, then once per interval.
func firstPing(interval time.Duration) time.Duration {
	half := interval / 2
	if half <= 0 {
		return interval
	}
	return half + rand.N(interval-half)
}
