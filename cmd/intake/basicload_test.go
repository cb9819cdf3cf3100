package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/binarytest"
	"github.com/mightyetl/mightyetl/internal/pgtest"
	"github.com/mightyetl/mightyetl/internal/testio"
)

// TestFreshIntakeServesConcurrentValidBasicClients is issue 29 item 1 with
// the real binary: a freshly started intake (cold credential cache, the
// production argon2id parameters) gets 32 clients from 127.0.0.1 at once,
// each sending 20 authenticated GET /api/etl/jobs with the correct
// password as fast as it can. Every answer is 200: concurrent
// verifications of one credential share one hash computation, and the
// requests waiting on it are not charged to the address's flood budget.
// Before the fix the hash gate ran one verification for the address,
// queued 8 and refused the rest with 429 etl_authentication_rate_limited.
func TestFreshIntakeServesConcurrentValidBasicClients(t *testing.T) {
	t.Parallel()
	_, dbURL := pgtest.NewDatabase(t)
	bin := binarytest.Binary(t, "intake")
	const principal, password = "loader", "correct horse battery staple"
	line, err := auth.CredentialLine(principal, []byte(password))
	if err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(creds, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + testio.ClosedPort(t)
	intake := binarytest.Spawn(t, binarytest.Options{Path: bin, Env: binarytest.Env(binarytest.Isolated,
		"DATABASE_URL="+dbURL, "MIGHTYETL_HTTP_ADDR="+addr, "MIGHTYETL_AUTH_MODE=basic",
		"MIGHTYETL_BASIC_CREDENTIALS_FILE="+creds, "MIGHTYETL_PRINCIPAL_HASH_KEY=0123456789abcdef0123456789abcdef")})
	const clients, perClient = 32, 20
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer client.CloseIdleConnections()
	// /readyz needs no credentials: the credential cache is still cold.
	if err := intake.WaitReady(context.Background(), 30*time.Second, "GET /readyz 200", binarytest.HTTPOK(client, "http://"+addr+"/readyz")); err != nil {
		t.Fatal(err)
	}

	var (
		mu       sync.Mutex
		statuses = map[string]int{} // "200", "429 etl-authentication-rate-limited", "error: ..."
	)
	record := func(s string) {
		mu.Lock()
		statuses[s]++
		mu.Unlock()
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			<-start
			for range perClient {
				req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/api/etl/jobs", nil)
				if err != nil {
					record("error: " + err.Error())
					return
				}
				req.SetBasicAuth(principal, password)
				res, err := client.Do(req)
				if err != nil {
					record("error: " + err.Error())
					continue
				}
				body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
				res.Body.Close()
				s := fmt.Sprint(res.StatusCode)
				if res.StatusCode != http.StatusOK {
					s += " " + problemCode(body)
				}
				record(s)
			}
		})
	}
	close(start)
	wg.Wait()

	if statuses["200"] != clients*perClient {
		var got []string
		for s, n := range statuses {
			got = append(got, fmt.Sprintf("%s: %d", s, n))
		}
		sort.Strings(got)
		t.Fatalf("%d clients x %d requests with valid credentials against a fresh intake: want %d x 200, got %s",
			clients, perClient, clients*perClient, strings.Join(got, ", "))
	}
}

// problemCode returns the "type" member of a problem+json body (it names
// the code), or the first bytes of the body.
func problemCode(body []byte) string {
	var p struct{ Type string }
	if json.Unmarshal(body, &p) == nil && p.Type != "" {
		return p.Type
	}
	s := string(body)
	return strings.TrimSpace(s[:min(len(s), 80)])
}
