package pgtest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy is a TCP proxy between a client and the test PostgreSQL server that a
// test controls, to cut connections the way a failover or a network fault
// does. The database decides nothing differently; only the path breaks.
type Proxy struct {
	t      testing.TB
	target string
	ln     net.Listener
	mu     sync.Mutex
	cut    bool
	held   bool // HoldReplies: the server's bytes are dropped
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewProxy starts a proxy to the server of databaseURL and returns it; URL
// gives the same database through the proxy. It stops when the test ends.
func NewProxy(t testing.TB, databaseURL string) *Proxy {
	t.Helper()
	u, err := url.Parse(databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{t: t, target: u.Host, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// URL returns databaseURL rewritten to go through the proxy.
func (p *Proxy) URL(databaseURL string) string {
	u, _ := url.Parse(databaseURL)
	u.Host = p.ln.Addr().String()
	return u.String()
}

// Cut closes every proxied connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// HoldReplies drops everything the server sends on every proxied
// connection, open now or later, until Restore, while the clients' bytes
// still reach the server: a request (a COMMIT) takes effect and its answer
// is lost, as when a connection breaks after the server received it.
func (p *Proxy) HoldReplies() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

// Restore lets connections through again (after Cut or HoldReplies).
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut, p.held = false, false
	p.mu.Unlock()
}

// holding reports whether the server's bytes are dropped now.
func (p *Proxy) holding() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.mu.Unlock()
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, up, true)
		go p.pipe(up, c, false)
	}
}

// pipe copies src to dst until either closes; fromServer marks the
// server-to-client direction, whose bytes HoldReplies drops.
func (p *Proxy) pipe(dst, src net.Conn, fromServer bool) {
	defer p.wg.Done()
	if fromServer {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 && !p.holding() {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
	} else {
		_, _ = io.Copy(dst, src)
	}
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

func (p *Proxy) close() {
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
