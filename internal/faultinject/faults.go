package faultinject

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"
)

// FaultKind names one kind of fault.
type FaultKind string

// The faults the injector knows.
const (
	FaultWorkerKill  FaultKind = "worker_sigkill"      // SIGKILL a worker, restart it
	FaultIntakeKill  FaultKind = "intake_sigkill"      // SIGKILL the intake (API, request consumer, relay), restart it
	FaultNATSRestart FaultKind = "nats_restart"        // stop nats-server, start it again on the same store
	FaultPGRestart   FaultKind = "postgres_immediate"  // pg_ctl stop -m immediate, start (crash recovery)
	FaultPGOutage    FaultKind = "postgres_outage"     // the same, down longer than a lease
	FaultDBReset     FaultKind = "worker_db_tcp_reset" // RST every worker database connection
	FaultDBLatency   FaultKind = "worker_db_latency"   // add latency to every worker database chunk for a while
)

// AllFaults is every kind, in report order.
var AllFaults = []FaultKind{FaultWorkerKill, FaultIntakeKill, FaultNATSRestart, FaultPGRestart, FaultPGOutage, FaultDBReset, FaultDBLatency}

// Fault is one injected fault.
type Fault struct {
	Kind   FaultKind
	Target string        // process name, or how many connections, or the latency
	At     time.Time     // injected
	Down   time.Duration // how long the part was down or degraded
	Err    error         // the harness could not complete it (e.g. a restart failed)
}

// Injector injects faults into a System one at a time, in rounds that
// hold every kind once in a seeded random order, with a pause between
// faults. Worker 1 is never killed, so its RSS and goroutine counts span
// the whole run (the other workers and the intake restart).
type Injector struct {
	sys    *System
	rng    *rand.Rand
	gapMin time.Duration
	gapMax time.Duration

	mu     sync.Mutex
	faults []Fault
}

// NewInjector returns an injector with the given seed and a pause of
// 1.5-3.5 s between faults.
func NewInjector(sys *System, seed uint64) *Injector {
	return &Injector{sys: sys, rng: rand.New(rand.NewPCG(seed, 0xfa17)), gapMin: 1500 * time.Millisecond, gapMax: 3500 * time.Millisecond}
}

// Run injects faults until ctx ends, then returns with the system whole
// again: every fault in progress is completed (restarts done, latency
// removed). It returns an error when the system could not be restored.
func (in *Injector) Run(ctx context.Context) error {
	var deck []FaultKind
	for {
		if !sleep(ctx, jitter(in.rng, in.gapMin, in.gapMax)) {
			return nil
		}
		if len(deck) == 0 {
			deck = append(deck, AllFaults...)
			in.rng.Shuffle(len(deck), func(i, j int) { deck[i], deck[j] = deck[j], deck[i] })
		}
		kind := deck[0]
		deck = deck[1:]
		f := in.inject(ctx, kind)
		in.mu.Lock()
		in.faults = append(in.faults, f)
		in.mu.Unlock()
		if f.Err != nil && errors.Is(f.Err, errNotRestored) {
			return f.Err
		}
	}
}

var errNotRestored = errors.New("system not restored after a fault")

// inject runs one fault to its end. The pause while a part is down is short
// (0.3-1.5 s), so faults stay frequent; it never depends on ctx, so a part
// that is down is always brought back.
func (in *Injector) inject(ctx context.Context, kind FaultKind) Fault {
	f := Fault{Kind: kind, At: time.Now()}
	restoreCtx := context.WithoutCancel(ctx)
	down := jitter(in.rng, 300*time.Millisecond, 1500*time.Millisecond)
	restart := func(p *Process) {
		if !p.Kill() {
			f.Err = fmt.Errorf("%s was not running", p.Name)
			return
		}
		time.Sleep(down)
		p.Restart()
		if err := p.WaitReady(restoreCtx, readyWithin); err != nil {
			f.Err = fmt.Errorf("%w: %v", errNotRestored, err)
		}
	}
	switch kind {
	case FaultWorkerKill:
		// Worker 1 stays up for the whole run (see Injector).
		w := in.sys.Workers[0]
		if len(in.sys.Workers) > 1 {
			w = in.sys.Workers[1+in.rng.IntN(len(in.sys.Workers)-1)]
		}
		f.Target = w.Name
		restart(w)
	case FaultIntakeKill:
		f.Target = in.sys.Intake.Name
		restart(in.sys.Intake)
	case FaultNATSRestart:
		in.sys.NATS.Stop(10 * time.Second)
		time.Sleep(down)
		if err := in.sys.NATS.Start(restoreCtx); err != nil {
			f.Err = fmt.Errorf("%w: %v", errNotRestored, err)
		}
	case FaultPGRestart, FaultPGOutage:
		if kind == FaultPGOutage {
			// Longer than a lease: renewals fail closed, running handlers
			// stop, and every lease has expired when the database is back.
			down = jitter(in.rng, 7*time.Second, 9*time.Second)
		}
		if err := in.sys.PG.StopImmediate(restoreCtx); err != nil {
			f.Err = err
		}
		time.Sleep(down)
		if err := in.sys.PG.Start(restoreCtx); err != nil {
			f.Err = fmt.Errorf("%w: %v", errNotRestored, err)
		}
	case FaultDBReset:
		down = 0
		f.Target = strconv.Itoa(in.sys.Proxy.Reset()) + " connections"
	case FaultDBLatency:
		lat := jitter(in.rng, 50*time.Millisecond, 300*time.Millisecond)
		down = jitter(in.rng, 2*time.Second, 5*time.Second)
		f.Target = lat.Round(time.Millisecond).String()
		in.sys.Proxy.SetLatency(lat)
		time.Sleep(down)
		in.sys.Proxy.SetLatency(0)
	}
	f.Down = down
	return f
}

// Faults returns the faults injected so far.
func (in *Injector) Faults() []Fault {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]Fault(nil), in.faults...)
}
