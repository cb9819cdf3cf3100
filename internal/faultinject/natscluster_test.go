package faultinject

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mightyetl/mightyetl/internal/auth"
	"github.com/mightyetl/mightyetl/internal/events"
	"github.com/mightyetl/mightyetl/internal/intake"
)

// NATS cluster scenario bounds. The scenario waits on conditions (counts
// of acknowledgements and finished jobs, stream info), never on the clock;
// these bound the waits.
const (
	clusterNodes = 3
	// outageAcks: while a node is down, this many submissions are
	// acknowledged over HTTP or by the intake's NATS reply, and this many
	// requests by JetStream alone, before the node comes back.
	outageAcks = 5
	// clusterWait bounds each wait of the scenario.
	clusterWait = 2 * time.Minute
	// jsOnlyPrincipal publishes requests that wait for JetStream's
	// acknowledgement only (no reply).
	jsOnlyPrincipal = "fi-jsonly-0"
	// NATSFaultNodeKill is a cluster node killed with SIGKILL.
	NATSFaultNodeKill FaultKind = "nats_node_kill"
)

// TestNATSClusterNodeLoss runs the system on a three-node JetStream
// cluster (NATS_URL lists every node; MIGHTYETL_NATS_STREAM_REPLICAS=3, so
// the request stream, its consumer and the lifecycle stream are R3). Under
// HTTP and NATS load (the suite's producers, plus a publisher whose
// requests wait only for JetStream's acknowledgement) it kills the request
// stream's leader with SIGKILL, keeps the load until jobs finished and
// submissions were acknowledged on the two nodes left, starts the node
// again on its store and waits until every stream and consumer replica is
// current; then the same with another node. Then: every request JetStream
// acknowledged has exactly one job (none lost, none doubled), every job
// ends, and the checker's invariants hold (exactly-once loading, a
// terminal lifecycle event read from the R3 stream for every terminal
// job). Jobs finish while each node is down (database clock): the workers
// keep their wake-ups through a reconnect to another node or fall back to
// the poll.
func TestNATSClusterNodeLoss(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	started := time.Now()
	sys := startScenario(ctx, t, Config{Workers: 2, NATSNodes: clusterNodes},
		fmt.Sprintf("PostgreSQL, a %d-node NATS cluster (NATS_URL with every node)", clusterNodes))
	defer sys.Stop(context.WithoutCancel(ctx))

	nc, err := nats.Connect(sys.NATSURL(), nats.Name("faultinject-cluster-harness"), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	streams, consumers, err := clusterStreams(sys.Prefix)
	if err != nil {
		t.Fatal(err)
	}

	ledger := NewLedger()
	stopCtx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	finishCtx, stopFinishing := context.WithCancel(ctx)
	defer stopFinishing()
	producers, err := StartProducers(stopCtx, finishCtx, sys, ledger, seed)
	if err != nil {
		t.Fatalf("start producers: %v", err)
	}
	pub, err := startJSOnlyPublisher(stopCtx, finishCtx, sys, ledger, rand.New(rand.NewPCG(seed, 2000)))
	if err != nil {
		t.Fatal(err)
	}

	// Warm: load flows and both streams exist, R3, every replica current.
	if err := waitFor(ctx, clusterWait, 100*time.Millisecond, "load, and both streams R3 with every replica current", func() bool {
		if len(ledger.AckTimes()) < warmAcks || pub.ackedCount() < outageAcks || finishedJobs(ctx, sys) < warmFinished {
			return false
		}
		ok, err := StreamsCurrent(ctx, js, clusterNodes, streams, consumers)
		return err == nil && ok
	}); err != nil {
		t.Fatal(err)
	}
	for _, name := range streams {
		n, err := StreamReplicas(ctx, js, name)
		if err != nil {
			t.Fatal(err)
		}
		if n != clusterNodes {
			t.Fatalf("a product stream has %d replicas, want %d (MIGHTYETL_NATS_STREAM_REPLICAS)", n, clusterNodes)
		}
	}
	t.Logf("warm after %s: %d acknowledgements, %d JetStream-only requests acknowledged, both streams and the request consumer R%d and current",
		time.Since(started).Round(time.Millisecond), len(ledger.AckTimes()), pub.ackedCount(), clusterNodes)

	// The first victim leads the request stream (a leader election on top
	// of the loss); the second is another node.
	first, err := streamLeader(ctx, js, streams[0])
	if err != nil {
		t.Fatal(err)
	}
	victims := []*NATSNode{nodeNamed(sys.NATSCluster, first)}
	for _, n := range sys.NATSCluster.Nodes {
		if n != victims[0] {
			victims = append(victims, n)
			break
		}
	}
	if victims[0] == nil {
		t.Fatalf("the request stream's leader %q is no node of the cluster", first)
	}

	var faults []Fault
	for i, node := range victims {
		o, err := nodeOutage(ctx, sys, js, ledger, pub, node, streams, consumers)
		if err != nil {
			t.Fatalf("outage %d (%s): %v", i+1, node.Name, err)
		}
		faults = append(faults, Fault{Kind: NATSFaultNodeKill, Target: node.Name, At: o.killedAt, Down: o.down})
		t.Logf("outage %d: node %s killed (SIGKILL) for %s; while down: %d jobs finished (database clock), %d submissions acknowledged by reply or HTTP, %d requests acknowledged by JetStream, %d wake-ups received by the workers; caught up (every replica current) %s after its restart",
			i+1, node.Name, o.down.Round(time.Millisecond), o.finished, o.acks, o.jsAcks, o.wakeups, o.catchUp.Round(time.Millisecond))
		if o.finished < 1 {
			t.Errorf("outage %d: no job finished while %s was down", i+1, node.Name)
		}
	}

	// A tail of load on the healed cluster, then stop and converge.
	acksNow := len(ledger.AckTimes())
	if err := waitFor(ctx, clusterWait, 50*time.Millisecond, "acknowledgements after the second restart", func() bool {
		return len(ledger.AckTimes()) >= acksNow+outageAcks
	}); err != nil {
		t.Fatal(err)
	}
	stopProducing()
	finishTimer := time.AfterFunc(finishWithin, stopFinishing)
	_ = producers.Wait()
	pub.wait()
	finishTimer.Stop()
	stopFinishing()
	if err := WaitConverged(ctx, sys.DB, convergeWithin); err != nil {
		t.Errorf("did not converge: %v", err)
	}

	// Every request JetStream acknowledged has exactly one job; the
	// ledger learns its job id from the database (the publisher took no
	// reply), so the checker proves its rows and its lifecycle event.
	lost, doubled, found, err := resolveJSOnly(ctx, sys, ledger, pub)
	if err != nil {
		t.Fatal(err)
	}
	checker := &Checker{DB: sys.DB, NATSURL: sys.NATSURL(), Prefix: sys.Prefix, HashKey: sys.HashKey,
		Ledger: ledger, Procs: sys.Processes(), Faults: faults}
	report, err := checker.Check(ctx)
	if err != nil {
		t.Fatalf("checker: %v", err)
	}
	outages, err := sumMetric(ctx, sys, "mightyetl_nats_outages_total")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checker:\n%s", report.Summary())
	t.Logf("answers: %s", formatCounts(ledger.Responses()))
	t.Logf("NATS cluster figures: acknowledged by path: %s; JetStream-only requests acknowledged %d (publish errors retried %d), with exactly one job %d, lost %d, doubled %d; jobs %d, lifecycle events %d distinct (%d stream messages); NATS outages seen by the product processes (mightyetl_nats_outages_total, each a reconnect to another node) %d",
		formatCounts(ackedByPath(ledger, pub)), pub.ackedCount(), pub.errCount(), found, lost, doubled,
		report.Jobs, report.Events, report.EventCopies, int(outages))
	if len(report.Details) > 0 {
		_ = WriteFile(filepath.Join(sys.cfg.RunDir, "violations.txt"), report.Details)
	}
	if lost != 0 || doubled != 0 {
		t.Errorf("requests acknowledged by JetStream: %d lost, %d with more than one job", lost, doubled)
	}
	if n := report.Total(); n > 0 {
		t.Errorf("%d invariant violations (details with ids in violations.txt of the run directory)", n)
	}
	t.Logf("total %s", time.Since(started).Round(time.Second))
}

// outage is what nodeOutage measured.
type outage struct {
	killedAt time.Time     // harness clock
	down     time.Duration // kill to restart (harness clock)
	// finished counts jobs that reached a terminal state while the node
	// was down (updated_at between the database's now() before the kill
	// and before the restart); acks and jsAcks the acknowledgements in
	// that time, wakeups the wake-ups the workers received.
	finished, acks, jsAcks, wakeups int
	catchUp                         time.Duration // restart to every replica current
}

// nodeOutage kills node, keeps the load until jobs finished and both kinds
// of submission were acknowledged without it, starts it again and waits
// until every replica of streams and consumers is current.
func nodeOutage(ctx context.Context, sys *System, js jetstream.JetStream, ledger *Ledger, pub *jsOnlyPublisher,
	node *NATSNode, streams, consumers []string) (outage, error) {
	var o outage
	var dbKilled, dbRestart time.Time
	if err := sys.DB.QueryRow(ctx, `SELECT now()`).Scan(&dbKilled); err != nil {
		return o, err
	}
	wake0, err := sumWorkerMetric(ctx, sys, "mightyetl_nats_wakeups_received_total")
	if err != nil {
		return o, err
	}
	acks0, js0 := len(ledger.AckTimes()), pub.ackedCount()
	o.killedAt = time.Now()
	if err := node.Kill(); err != nil {
		return o, err
	}
	if err := waitFor(ctx, clusterWait, 50*time.Millisecond, "jobs finished and submissions acknowledged without "+node.Name, func() bool {
		var n int
		err := sys.DB.QueryRow(ctx, `SELECT count(*) FROM etl_job_records
			WHERE job_status IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND updated_at > $1`, dbKilled).Scan(&n)
		return err == nil && n >= 1 && len(ledger.AckTimes()) >= acks0+outageAcks && pub.ackedCount() >= js0+outageAcks
	}); err != nil {
		return o, err
	}
	if err := sys.DB.QueryRow(ctx, `SELECT now()`).Scan(&dbRestart); err != nil {
		return o, err
	}
	wake1, err := sumWorkerMetric(ctx, sys, "mightyetl_nats_wakeups_received_total")
	if err != nil {
		return o, err
	}
	o.acks, o.jsAcks, o.wakeups = len(ledger.AckTimes())-acks0, pub.ackedCount()-js0, int(wake1-wake0)
	restart := time.Now()
	o.down = restart.Sub(o.killedAt)
	if err := sys.DB.QueryRow(ctx, `SELECT count(*) FROM etl_job_records
		WHERE job_status IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AND updated_at > $1 AND updated_at <= $2`,
		dbKilled, dbRestart).Scan(&o.finished); err != nil {
		return o, err
	}
	if err := node.Start(ctx); err != nil {
		return o, err
	}
	if err := waitFor(ctx, clusterWait, 100*time.Millisecond, "every replica current after "+node.Name+" restarted", func() bool {
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		ok, err := StreamsCurrent(ictx, js, len(sys.NATSCluster.Nodes), streams, consumers)
		return err == nil && ok
	}); err != nil {
		return o, err
	}
	o.catchUp = time.Since(restart)
	return o, nil
}

// streamLeader is the server name of stream's leader.
func streamLeader(ctx context.Context, js jetstream.JetStream, stream string) (string, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return "", err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return "", err
	}
	if info.Cluster == nil {
		return "", fmt.Errorf("stream info without cluster information")
	}
	return info.Cluster.Leader, nil
}

func nodeNamed(c *NATSCluster, name string) *NATSNode {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// jsOnlyPublisher publishes valid ETL job requests and takes JetStream's
// acknowledgement (the PubAck: the request is stored on a quorum of the
// stream's replicas) as the only answer: it never waits for the intake's
// reply, so a request JetStream acknowledged and then lost would have no
// job and no retry to hide it. A publish that fails is retried with the
// same key and body (a copy stored without its acknowledgement reaching
// the publisher is the same key: the intake makes one job of both).
type jsOnlyPublisher struct {
	mu     sync.Mutex
	subs   []*Submission
	jsAck  map[*Submission]bool
	errs   int
	wg     sync.WaitGroup
	ledger *Ledger
}

func startJSOnlyPublisher(stop, finish context.Context, sys *System, ledger *Ledger, rng *rand.Rand) (*jsOnlyPublisher, error) {
	nc, err := nats.Connect(sys.NATSURL(), nats.Name("faultinject-jsonly"), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	subjects, err := events.NewSubjects(sys.Prefix)
	if err != nil {
		nc.Close()
		return nil, err
	}
	subject, err := subjects.Requests(jsOnlyPrincipal)
	if err != nil {
		nc.Close()
		return nil, err
	}
	p := &jsOnlyPublisher{jsAck: map[*Submission]bool{}, ledger: ledger}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer nc.Close()
		for stop.Err() == nil {
			records, rows, err := etlRecords(rng, 1+rng.IntN(5))
			if err != nil {
				ledger.unexpectedAnswer("harness: " + err.Error())
				return
			}
			s := &Submission{Kind: KindETLNATS, Principal: jsOnlyPrincipal, Key: newKey("fi-jsonly"), Body: records, Expected: rows}
			ledger.add(s)
			p.mu.Lock()
			p.subs = append(p.subs, s)
			p.mu.Unlock()
			for {
				msg := nats.NewMsg(subject)
				msg.Data = s.Body
				msg.Header.Set(events.IdempotencyKeyHeader, s.Key)
				pctx, cancel := context.WithTimeout(finish, 3*time.Second)
				_, perr := js.PublishMsg(pctx, msg)
				cancel()
				if perr == nil {
					ledger.response("nats jetstream ack (no reply wanted)")
					p.mu.Lock()
					p.jsAck[s] = true
					p.mu.Unlock()
					break
				}
				ledger.response("nats publish error (jetstream-only)")
				p.mu.Lock()
				p.errs++
				p.mu.Unlock()
				if !sleep(finish, jitter(rng, retryMin, retryMax)) {
					break
				}
			}
			sleep(stop, jitter(rng, pause/2, 3*pause/2))
		}
	}()
	return p, nil
}

func (p *jsOnlyPublisher) wait() { p.wg.Wait() }

func (p *jsOnlyPublisher) ackedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.jsAck)
}

func (p *jsOnlyPublisher) errCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errs
}

// resolveJSOnly finds each JetStream-only request's jobs by its key (the
// principal's scope hash and the key hash, as the intake stores them).
// A request JetStream acknowledged with no job is lost, one with two or
// more doubled; a request with exactly one job (acknowledged or not: a
// publish whose acknowledgement did not arrive may have been stored) is
// recorded in the ledger as acknowledged with that job, for the checker.
func resolveJSOnly(ctx context.Context, sys *System, ledger *Ledger, p *jsOnlyPublisher) (lost, doubled, found int, err error) {
	scope := auth.ScopeHash(sys.HashKey, jsOnlyPrincipal)
	rows, err := sys.DB.Query(ctx, `SELECT encode(submission_key_hash, 'hex'), job_record_id::text FROM etl_job_records
		WHERE encode(principal_scope_hash, 'hex') = $1`, scope)
	if err != nil {
		return 0, 0, 0, err
	}
	byKey := map[string][]string{}
	for rows.Next() {
		var k, id string
		if err := rows.Scan(&k, &id); err != nil {
			rows.Close()
			return 0, 0, 0, err
		}
		byKey[k] = append(byKey[k], id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.subs {
		ids := byKey[intake.SubmissionKeyHash(scope, s.Key)]
		switch {
		case len(ids) == 1:
			if p.jsAck[s] {
				found++
			}
			ledger.acked(s, ids[0])
		case len(ids) > 1:
			doubled++
		case p.jsAck[s]:
			lost++
		}
	}
	return lost, doubled, found, nil
}

// ackedByPath counts acknowledged submissions by how they were answered:
// HTTP 202, the intake's NATS reply, JetStream's acknowledgement alone.
func ackedByPath(ledger *Ledger, p *jsOnlyPublisher) map[string]int {
	p.mu.Lock()
	jsOnly := map[*Submission]bool{}
	for _, s := range p.subs {
		jsOnly[s] = true
	}
	acked := len(p.jsAck)
	p.mu.Unlock()
	out := map[string]int{"jetstream ack only": acked}
	for _, s := range ledger.Submissions() {
		if jsOnly[s] || !s.State().Acked {
			continue
		}
		if s.Path == "" {
			out["nats reply"]++
		} else {
			out["http 202"]++
		}
	}
	return out
}

// sumWorkerMetric sums the samples of metric name over the workers'
// /metrics.
func sumWorkerMetric(ctx context.Context, sys *System, name string) (float64, error) {
	var total float64
	for _, base := range sys.WorkerURLs {
		v, err := scrapeSum(ctx, base+"/metrics", name)
		if err != nil {
			return 0, err
		}
		total += v
	}
	return total, nil
}

// sumMetric sums the samples of metric name over every product process.
func sumMetric(ctx context.Context, sys *System, name string) (float64, error) {
	var total float64
	for _, base := range sys.MetricsURLs() {
		v, err := scrapeSum(ctx, base+"/metrics", name)
		if err != nil {
			return 0, err
		}
		total += v
	}
	return total, nil
}

// scrapeSum is the sum of every sample of metric name at url (0 when the
// process exposes none).
func scrapeSum(ctx context.Context, url, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scrape metrics: %w", err)
	}
	defer resp.Body.Close()
	var total float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err == nil {
			total += v
		}
	}
	return total, sc.Err()
}
