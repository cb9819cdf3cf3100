package auth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkBasicFirstLoginUnderFlood measures a real user's first Basic
// login (a cache miss: one production argon2id verification, 19 MiB, t=2)
// over loopback HTTP while floodClients connections from another address
// send unknown principals back to back without honouring Retry-After. The
// flood comes from 127.0.0.1, the real user from 127.0.0.3. It reports the
// real user's latency (p50, p90, max) and the flood's answers per second
// by status.
//
//	go test -run '^$' -bench BasicFirstLoginUnderFlood -benchtime 40x ./internal/auth/
func BenchmarkBasicFirstLoginUnderFlood(b *testing.B) {
	for _, bc := range []struct {
		name  string
		opts  BasicOptions
		flood int
	}{
		{"no-flood", BasicOptions{}, 0},
		{"defaults", BasicOptions{}, floodClients},
		{"no-failure-limit", BasicOptions{FailureBurst: -1}, floodClients},
	} {
		b.Run(bc.name, func(b *testing.B) { benchFirstLoginUnderFlood(b, bc.opts, bc.flood) })
	}
}

// floodClients is the number of flood connections.
const floodClients = 64

func benchFirstLoginUnderFlood(b *testing.B, opts BasicOptions, floodClients int) {
	hash, err := hashPasswordWith(productionArgon2, []byte("correct horse"))
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "credentials")
	if err := os.WriteFile(path, []byte("alice:"+hash+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	opts.CredentialsFile = path
	opts.CacheTTL = -1 // every login of the real user is a first login
	basic, err := NewBasic(opts)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := basic.Authenticate(r)
		switch te := (*ThrottleError)(nil); {
		case err == nil:
			w.WriteHeader(http.StatusOK)
		case errors.As(err, &te) && te.Err == ErrRateLimited:
			w.WriteHeader(http.StatusTooManyRequests)
		case errors.As(err, &te):
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	defer srv.Close()

	client := func(local string, conns int) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
		return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}}
	}
	send := func(c *http.Client, user, pass string) (int, error) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.SetBasicAuth(user, pass)
		res, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		res.Body.Close()
		return res.StatusCode, nil
	}

	ctx, stop := context.WithCancel(context.Background())
	floodClient := client("127.0.0.1", max(1, floodClients))
	var mu sync.Mutex
	answers := map[int]int{}
	var wg sync.WaitGroup
	for i := range floodClients {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				code, err := send(floodClient, fmt.Sprintf("mallory-%d-%d", i, n), "guess")
				if err != nil {
					continue
				}
				mu.Lock()
				answers[code]++
				mu.Unlock()
			}
		})
	}
	defer floodClient.CloseIdleConnections()
	defer wg.Wait()
	defer stop()
	time.Sleep(500 * time.Millisecond) // let the flood fill every queue

	realUser := client("127.0.0.3", 1)
	defer realUser.CloseIdleConnections()
	lat := make([]time.Duration, 0, b.N)
	floodStart := time.Now()
	mu.Lock()
	clear(answers)
	mu.Unlock()
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		code, err := send(realUser, "alice", "correct horse")
		if err != nil || code != http.StatusOK {
			b.Fatalf("real user: %d %v", code, err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	elapsed := time.Since(floodStart).Seconds()
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*9/10]), "p90-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
	mu.Lock()
	for _, code := range []int{401, 429, 503} {
		b.ReportMetric(float64(answers[code])/elapsed, fmt.Sprintf("flood-%d/s", code))
	}
	mu.Unlock()
}
