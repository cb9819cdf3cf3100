package faultinject

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a TCP proxy in front of one server (the workers' PostgreSQL) that
// the fault injector controls: it can delay every chunk it forwards and
// reset every open connection with a TCP RST (SO_LINGER 0), the way a
// failing network path or a middlebox does. While the server is down, new
// connections are accepted and closed at once. Safe for concurrent use.
type Proxy struct {
	target  string
	ln      net.Listener
	latency atomic.Int64 // nanoseconds added before each forwarded chunk
	mu      sync.Mutex
	conns   map[*net.TCPConn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[*net.TCPConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every forwarded chunk, in both directions, by d (zero
// removes the delay). A request/response round trip grows by about 2d.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Reset sends a TCP RST on both sides of every open connection and returns
// how many connections it reset. New connections are accepted as before.
func (p *Proxy) Reset() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		_ = c.SetLinger(0) // close with RST instead of FIN
		_ = c.Close()
		delete(p.conns, c)
		n++
	}
	return n / 2
}

// Open is the number of proxied connections open now.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

// Close stops accepting, closes every connection and waits for the
// forwarding goroutines. Safe to call twice.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Reset()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		down, upTCP := c.(*net.TCPConn), up.(*net.TCPConn)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = down.Close()
			_ = upTCP.Close()
			continue
		}
		p.conns[down], p.conns[upTCP] = struct{}{}, struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(upTCP, down)
		go p.pipe(down, upTCP)
	}
}

// pipe copies src to dst, each chunk after the current latency, until
// either side fails; then it closes both.
func (p *Proxy) pipe(dst, src *net.TCPConn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(p.latency.Load()); d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
	_ = dst.Close()
	_ = src.Close()
}
