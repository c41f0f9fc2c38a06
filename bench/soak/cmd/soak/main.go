// soak runs a replicated Kavach cluster (a primary and two backups, `kavach serve` processes
// on loopback, pools under a temporary directory in /dev/shm) under client load while it
// injects faults at random from a seed: kill -9 of a backup and its restart, SIGSTOP/SIGCONT
// of a backup, kill -9 of the primary and a restart in place, and failover (kill -9 of the
// primary, then `kavach promote` of a backup, or, with --failover etcd, the electors of
// `kavach elect` promoting one through etcd). Clients SET/GET/INCR a few hundred keys with
// unique values and record every operation in a history (JSON lines). After every failover
// and at the end, with the clients paused, a ledger check reads every key from the primary:
// every acknowledged write must still be there (or a write that could have come after it).
//
// It stops when the acknowledged writes reach --volume times --repl-log-mib of bytes (keys and
// values), or after --duration, or when the replication log is full. It writes
// OUT/summary.json, OUT/history.jsonl and OUT/logs/. Check the history with `check`.
//
// Exit status: 0 the volume was written with no refused and no lost write; 1 a write was lost
// (or a value read was not one written), or the run fell short of the target (writes refused,
// or the duration ended first); 2 could not run.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"kavach.dev/bench/soak/resp"
)

type config struct {
	kavach          string
	w               int
	seed            int64
	volume          float64
	replLogMiB      int
	valueSize       int
	keys, counters  int
	clients         int
	duration        time.Duration
	faultEvery      time.Duration
	failover        string
	faults          string
	out, shm        string
	storeArgs       string
	backupTimeoutMs int
	ttl             int
	opTimeout       time.Duration
}

type fault struct {
	AtS    float64 `json:"at_s"`
	Kind   string  `json:"kind"`
	Node   int     `json:"node"`
	Detail string  `json:"detail,omitempty"`
	TookS  float64 `json:"took_s"`
}

type check struct {
	AtS     float64  `json:"at_s"`
	After   string   `json:"after"`
	Primary int      `json:"primary"`
	Lost    []loss   `json:"lost"`
	Unread  []string `json:"unread,omitempty"`
}

type summary struct {
	Config struct {
		W, N, ReplLogMiB, ValueSize, Keys, Counters, Clients int
		Seed                                                 int64
		Volume                                               float64
		Failover, Faults, StoreArgs                          string
		BackupTimeoutMs                                      int
		DurationLimitS                                       float64
	} `json:"config"`
	ElapsedS           float64          `json:"elapsed_s"`
	Stopped            string           `json:"stopped"`
	WritesAttempted    int64            `json:"writes_attempted"`
	WritesAcknowledged int64            `json:"writes_acknowledged"`
	WritesRefused      int64            `json:"writes_refused"`
	WritesUnknown      int64            `json:"writes_no_reply"`
	WritesReadonly     int64            `json:"writes_readonly"`
	FirstRefusal       string           `json:"first_refusal,omitempty"`
	FirstRefusalAtS    float64          `json:"first_refusal_at_s,omitempty"`
	Refusals           map[string]int64 `json:"refusals_by_text,omitempty"`
	Reads              int64            `json:"reads_ok"`
	ReadErrors         int64            `json:"reads_failed"`
	BytesAcknowledged  int64            `json:"bytes_acknowledged"`
	BytesAttempted     int64            `json:"bytes_attempted"`
	ReplLogBytes       int64            `json:"repl_log_bytes"`
	VolumeReached      float64          `json:"volume_reached"` // acknowledged bytes / log bytes
	Failovers          int              `json:"failovers"`
	PrimaryRestarts    int              `json:"primary_restarts"`
	FaultCounts        map[string]int   `json:"fault_counts"`
	SupervisorRestarts int              `json:"supervisor_restarts"` // etcd mode: electors (and nodes) restarted after they exited
	Faults             []fault          `json:"faults"`
	Checks             []check          `json:"ledger_checks"`
	LedgerOK           bool             `json:"ledger_ok"`
	Corrupt            string           `json:"corrupt_read,omitempty"`
	Errors             []string         `json:"errors,omitempty"`
	Verdict            string           `json:"verdict"`
	History            string           `json:"history"`
}

func main() {
	cfg := &config{}
	flag.StringVar(&cfg.kavach, "kavach", "target/release/kavach", "the kavach binary")
	flag.IntVar(&cfg.w, "w", 1, "write quorum W (1 or 2 of the 2 backups)")
	flag.Int64Var(&cfg.seed, "seed", 1, "seed of the fault schedule and the clients' choices")
	flag.Float64Var(&cfg.volume, "volume", 10, "stop after this many times --repl-log-mib of acknowledged bytes")
	flag.IntVar(&cfg.replLogMiB, "repl-log-mib", 8, "the primary's --repl-log-mib")
	flag.IntVar(&cfg.valueSize, "value-size", 256, "bytes of each SET value")
	flag.IntVar(&cfg.keys, "keys", 300, "registers (SET/GET)")
	flag.IntVar(&cfg.counters, "counters", 20, "counters (INCR/GET); 0 for none")
	flag.IntVar(&cfg.clients, "clients", 8, "client goroutines, one connection each")
	flag.DurationVar(&cfg.duration, "duration", 10*time.Minute, "stop after this long even if the volume is not reached")
	flag.DurationVar(&cfg.faultEvery, "fault-every", 2*time.Second, "mean time between faults (uniform 0.5x-1.5x)")
	flag.StringVar(&cfg.failover, "failover", "manual", "how the primary is replaced: manual (kavach promote) or etcd (kavach elect)")
	flag.StringVar(&cfg.faults, "faults", "kill-backup,stop-backup,restart-primary,failover", "fault kinds to draw from (none: no faults)")
	flag.StringVar(&cfg.out, "out", "", "output directory (default: target/soak/w<W>-<failover>-seed<SEED>)")
	flag.StringVar(&cfg.shm, "shm", "/dev/shm", "where the temporary directory of the pools goes")
	flag.StringVar(&cfg.storeArgs, "store-args", "--shards 4 --slot-mib 8 --log-mib 4", "extra kavach serve flags for every node")
	flag.IntVar(&cfg.backupTimeoutMs, "backup-timeout-ms", 1000, "--backup-timeout-ms of every node")
	flag.IntVar(&cfg.ttl, "ttl", 2, "etcd mode: the electors' --ttl (seconds)")
	flag.DurationVar(&cfg.opTimeout, "op-timeout", 10*time.Second, "a client's wait for one reply")
	flag.Parse()
	if flag.NArg() > 0 {
		die("unexpected argument %q", flag.Arg(0))
	}
	if cfg.w < 1 || cfg.w > 2 {
		die("--w must be 1 or 2, not %d", cfg.w)
	}
	if cfg.failover != "manual" && cfg.failover != "etcd" {
		die("--failover must be manual or etcd, not %q", cfg.failover)
	}
	if cfg.volume <= 0 || cfg.replLogMiB < 1 || cfg.valueSize < 32 || cfg.keys < 1 || cfg.counters < 0 ||
		cfg.clients < 1 || cfg.duration <= 0 || cfg.faultEvery <= 0 || cfg.ttl < 1 {
		die("out of range: --volume > 0, --repl-log-mib >= 1, --value-size >= 32, --keys >= 1, --counters >= 0, --clients >= 1, --duration, --fault-every > 0, --ttl >= 1")
	}
	kinds := []string{}
	if cfg.faults != "none" {
		for _, k := range strings.Split(cfg.faults, ",") {
			switch k {
			case "kill-backup", "stop-backup", "restart-primary", "failover":
				if k == "restart-primary" && cfg.failover == "etcd" {
					continue // in etcd mode the electors own the primary: a restart is a failover
				}
				kinds = append(kinds, k)
			default:
				die("unknown fault kind %q (kill-backup, stop-backup, restart-primary, failover, or none)", k)
			}
		}
	}
	if _, err := os.Stat(cfg.kavach); err != nil {
		die("the kavach binary: %v", err)
	}
	if cfg.out == "" {
		cfg.out = fmt.Sprintf("target/soak/w%d-%s-seed%d", cfg.w, cfg.failover, cfg.seed)
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		die("%v", err)
	}
	os.Exit(run(cfg, kinds))
}

func die(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "soak: "+f+"\n", a...)
	os.Exit(2)
}

func say(l *ledger, f string, a ...any) {
	fmt.Fprintf(os.Stderr, "[soak %7.2fs] %s\n", time.Since(l.start).Seconds(), fmt.Sprintf(f, a...))
}

func run(cfg *config, kinds []string) int {
	root, err := os.MkdirTemp(cfg.shm, "kavach-soak-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: temporary directory: %v\n", err)
		return 2
	}
	defer os.RemoveAll(root)
	histPath := filepath.Join(cfg.out, "history.jsonl")
	l, err := newLedger(histPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		return 2
	}
	var s summary
	s.Config.W, s.Config.N, s.Config.ReplLogMiB, s.Config.ValueSize = cfg.w, 2, cfg.replLogMiB, cfg.valueSize
	s.Config.Keys, s.Config.Counters, s.Config.Clients, s.Config.Seed = cfg.keys, cfg.counters, cfg.clients, cfg.seed
	s.Config.Volume, s.Config.Failover, s.Config.Faults, s.Config.StoreArgs = cfg.volume, cfg.failover, strings.Join(kinds, ","), cfg.storeArgs
	s.Config.BackupTimeoutMs, s.Config.DurationLimitS = cfg.backupTimeoutMs, cfg.duration.Seconds()
	s.FaultCounts = map[string]int{}
	s.History = histPath
	s.ReplLogBytes = int64(cfg.replLogMiB) << 20

	c, err := newCluster(cfg, root)
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		return 2
	}
	defer c.stopAll()
	code := func() int {
		// ---- start ----
		var primary *node
		if cfg.failover == "etcd" {
			if err := ensureEtcd(); err != nil {
				s.Errors = append(s.Errors, "etcd mode not run: "+err.Error())
				say(l, "etcd mode NOT run: %v", err)
				return 2
			}
			if err := c.startEtcd(root); err != nil {
				s.Errors = append(s.Errors, err.Error())
				return 2
			}
			for _, n := range c.nodes {
				if err := c.start(n, "backup"); err != nil {
					s.Errors = append(s.Errors, err.Error())
					return 2
				}
			}
			for _, n := range c.nodes {
				if err := c.startElector(n); err != nil {
					s.Errors = append(s.Errors, err.Error())
					return 2
				}
			}
			p, err := c.awaitPrimary(l, 90*time.Second)
			if err != nil {
				s.Errors = append(s.Errors, "first election: "+err.Error())
				return 2
			}
			primary = p
		} else {
			for _, n := range c.nodes[1:] {
				if err := c.start(n, "backup"); err != nil {
					s.Errors = append(s.Errors, err.Error())
					return 2
				}
			}
			primary = c.nodes[0]
			if err := c.start(primary, "primary"); err != nil {
				s.Errors = append(s.Errors, err.Error())
				return 2
			}
		}
		say(l, "cluster up: primary n%d (W=%d, %s failover), target %.0f bytes", primary.idx, cfg.w, cfg.failover,
			cfg.volume*float64(s.ReplLogBytes))

		// ---- load ----
		w := &workers{cfg: cfg, l: l}
		w.setPrimary(primary.addr())
		for i := 0; i < cfg.clients; i++ {
			w.wg.Add(1)
			go w.run(i, cfg.seed*1000+int64(i))
		}
		r := rand.New(rand.NewSource(cfg.seed))
		target := int64(cfg.volume * float64(s.ReplLogBytes))
		deadline := time.Now().Add(cfg.duration)
		audit := func(after string) bool {
			w.gate.Lock()
			defer w.gate.Unlock()
			t := time.Now()
			lost, unread := w.audit(primary.addr(), cfg.clients)
			s.Checks = append(s.Checks, check{AtS: time.Since(l.start).Seconds(), After: after, Primary: primary.idx,
				Lost: lost, Unread: unread})
			say(l, "ledger check after %s on n%d: %d lost, %d unread (%.2f s)", after, primary.idx, len(lost),
				len(unread), time.Since(t).Seconds())
			for _, x := range lost {
				say(l, "LOST key %s: expected %s (acknowledged at %.3f s), read %s: %s", x.Key, x.Expected, x.AckedAtS, x.Read, x.Reason)
			}
			return len(lost) == 0 && len(unread) == 0
		}
		next := time.Now().Add(jitter(r, cfg.faultEvery))
		stopped := ""
		fatal := false
		// endHeal: the run has stopped and the primary refuses reads: one more restart (or
		// failover) so that the last ledger check can read.
		endHeal := ""
		for {
			time.Sleep(50 * time.Millisecond)
			if stopped == "" {
				switch {
				case l.ackedBytes.Load() >= target:
					stopped = "volume reached"
				case time.Now().After(deadline):
					stopped = "duration ended"
				case l.logFull.Load():
					stopped = "the replication log is full"
				}
			}
			if stopped != "" {
				w.stop.Store(true)
				w.wg.Wait()
				text := probe(primary.addr(), cfg.opTimeout)
				if text == "" || endHeal != "" {
					break
				}
				endHeal = text
				say(l, "the primary refuses reads at the end: %s", text)
			}
			heal := l.quorumLost.Swap(false) || endHeal != ""
			if !heal && (len(kinds) == 0 || time.Now().Before(next)) {
				continue
			}
			kind := ""
			if heal {
				// The primary refuses writes until it recovers (today); restart it (manual mode) or
				// let another node take over (etcd mode), as an operator would.
				kind = "restart-primary"
				if cfg.failover == "etcd" {
					kind = "failover"
				}
			} else {
				kind = kinds[r.Intn(len(kinds))]
			}
			f := fault{AtS: time.Since(l.start).Seconds(), Kind: kind}
			if endHeal != "" {
				f.Detail = "at the end, the primary refused a read; "
			} else if heal {
				f.Detail = "after a write was refused for a lost quorum; "
			}
			t := time.Now()
			var ferr error
			switch kind {
			case "kill-backup", "stop-backup":
				var bs []*node
				for _, n := range c.nodes {
					if n != primary {
						bs = append(bs, n)
					}
				}
				b := bs[r.Intn(len(bs))]
				f.Node = b.idx
				pause := time.Duration(200+r.Intn(2800)) * time.Millisecond
				if kind == "kill-backup" {
					b.srv.kill()
					time.Sleep(pause)
					ferr = c.start(b, "backup")
				} else {
					_ = b.srv.cmd.Process.Signal(syscall.SIGSTOP)
					time.Sleep(pause)
					_ = b.srv.cmd.Process.Signal(syscall.SIGCONT)
				}
				f.Detail += fmt.Sprintf("for %v", pause)
			case "restart-primary":
				f.Node = primary.idx
				// Killed under load: the requests in flight lose their answers.
				primary.srv.kill()
				w.setPrimary("")
				ferr = c.start(primary, "primary")
				if ferr == nil {
					w.setPrimary(primary.addr())
					s.PrimaryRestarts++
				}
			case "failover":
				f.Node = primary.idx
				old := primary
				if cfg.failover == "manual" {
					old.srv.kill()
					w.setPrimary("")
					if ferr = c.start(old, "backup"); ferr == nil {
						var bs []*node
						for _, n := range c.nodes {
							if n != old {
								bs = append(bs, n)
							}
						}
						nb := bs[r.Intn(len(bs))]
						var out string
						out, ferr = c.promote(nb)
						f.Detail += fmt.Sprintf("n%d promoted: %s", nb.idx, lastLine(out))
						if ferr == nil {
							primary = nb
						}
					}
				} else {
					// The primary's machine dies (node and elector) and comes back at once: its
					// node as a backup, with its elector. Any node may win the election.
					old.elector.kill()
					old.srv.kill()
					w.setPrimary("")
					if ferr = c.start(old, "backup"); ferr == nil {
						ferr = c.startElector(old)
					}
					var nb *node
					if ferr == nil {
						nb, ferr = c.awaitPrimary(l, 90*time.Second)
					}
					if ferr == nil {
						primary = nb
						f.Detail += fmt.Sprintf("n%d elected", nb.idx)
					}
				}
				if ferr == nil {
					w.setPrimary(primary.addr())
					s.Failovers++
				}
			}
			f.TookS = time.Since(t).Seconds()
			s.Faults = append(s.Faults, f)
			s.FaultCounts[kind]++
			say(l, "fault %s on n%d: %s (%.2f s)", kind, f.Node, f.Detail, f.TookS)
			if ferr != nil {
				s.Errors = append(s.Errors, fmt.Sprintf("%s at %.2f s: %v", kind, f.AtS, ferr))
				say(l, "fault %s failed: %v", kind, ferr)
				if stopped == "" {
					stopped = "a fault could not be completed"
				}
				fatal = true
				break
			}
			if cfg.failover == "etcd" {
				c.supervise(l)
			}
			if kind == "restart-primary" || kind == "failover" {
				after := kind
				if endHeal != "" {
					after = "the end"
				}
				if !audit(after) {
					if stopped == "" {
						stopped = "the ledger check failed"
					}
					break
				}
			}
			if endHeal != "" {
				break
			}
			next = time.Now().Add(jitter(r, cfg.faultEvery))
		}
		s.Stopped = stopped
		w.stop.Store(true)
		w.wg.Wait()
		if !fatal && (len(s.Checks) == 0 || s.Checks[len(s.Checks)-1].After != "the end") {
			audit("the end")
		}
		if fatal {
			return 2
		}
		return 0
	}()

	// ---- summary ----
	for _, u := range c.unexpected() {
		s.Errors = append(s.Errors, u)
		fmt.Fprintf(os.Stderr, "soak: %s\n", u)
	}
	s.ElapsedS = time.Since(l.start).Seconds()
	s.WritesAttempted, s.WritesAcknowledged = l.attempted.Load(), l.acked.Load()
	s.WritesRefused, s.WritesUnknown, s.WritesReadonly = l.refused.Load(), l.unknown.Load(), l.readonly.Load()
	if v, ok := l.firstRefusal.Load().(string); ok {
		s.FirstRefusal, s.FirstRefusalAtS = v, float64(l.firstRefusalAt.Load())/1e9
	}
	if v, ok := l.corrupt.Load().(string); ok {
		s.Corrupt = v
	}
	s.Reads, s.ReadErrors = l.gets.Load(), l.getErrs.Load()
	s.SupervisorRestarts = c.restarts
	s.Refusals = l.refusals
	s.BytesAcknowledged, s.BytesAttempted = l.ackedBytes.Load(), l.attemptedBytes.Load()
	s.VolumeReached = float64(s.BytesAcknowledged) / float64(s.ReplLogBytes)
	s.LedgerOK = len(s.Checks) > 0
	for _, ch := range s.Checks {
		if len(ch.Lost) > 0 || len(ch.Unread) > 0 {
			s.LedgerOK = false
		}
	}
	if err := l.close(); err != nil {
		s.Errors = append(s.Errors, "history: "+err.Error())
		code = 2
	}
	lost := false
	for _, ch := range s.Checks {
		lost = lost || len(ch.Lost) > 0
	}
	switch {
	case lost || s.Corrupt != "":
		s.Verdict, code = "FAIL: the ledger found an acknowledged write lost or a value never written", 1
	case code == 2 || !s.LedgerOK:
		s.Verdict, code = "could not run to the end: "+strings.Join(s.Errors, "; "), 2
	case s.WritesRefused > 0:
		s.Verdict, code = fmt.Sprintf("FAIL: %d writes refused (first: %q); nothing acknowledged was lost", s.WritesRefused, s.FirstRefusal), 1
	case s.Stopped != "volume reached":
		s.Verdict, code = fmt.Sprintf("FAIL: stopped before the volume (%s) at %.2fx the log; nothing acknowledged was lost", s.Stopped, s.VolumeReached), 1
	default:
		s.Verdict = fmt.Sprintf("ok: %.2fx the log written, nothing refused, nothing lost", s.VolumeReached)
	}
	b, _ := json.MarshalIndent(&s, "", "  ")
	if err := os.WriteFile(filepath.Join(cfg.out, "summary.json"), append(b, '\n'), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "soak: summary: %v\n", err)
		return 2
	}
	fmt.Printf("soak: W=%d %s seed %d: %s\n", cfg.w, cfg.failover, cfg.seed, s.Verdict)
	fmt.Printf("soak: %d writes sent, %d acknowledged, %d refused, %d without a reply; %.2f MiB acknowledged = %.2fx --repl-log-mib %d; %d failovers, %d restarts of the primary, %d faults in all; %d ledger checks\n",
		s.WritesAttempted, s.WritesAcknowledged, s.WritesRefused, s.WritesUnknown, float64(s.BytesAcknowledged)/(1<<20),
		s.VolumeReached, cfg.replLogMiB, s.Failovers, s.PrimaryRestarts, len(s.Faults), len(s.Checks))
	fmt.Printf("soak: summary %s, history %s\n", filepath.Join(cfg.out, "summary.json"), histPath)
	return code
}

// probe reads one key from addr: "" if the server answered, else its error.
func probe(addr string, timeout time.Duration) string {
	cn, err := resp.Dial(addr, timeout)
	if err != nil {
		return err.Error()
	}
	defer cn.Close()
	if _, err := cn.Do("GET", regKey(0)); err != nil {
		return err.Error()
	}
	return ""
}

func jitter(r *rand.Rand, mean time.Duration) time.Duration {
	return time.Duration(float64(mean) * (0.5 + r.Float64()))
}

// supervise restarts, as a supervisor would, any elector that exited (fenced, or it lost its
// lease) and its node as a backup.
func (c *cluster) supervise(l *ledger) {
	for _, n := range c.nodes {
		if n.elector != nil && !n.elector.alive() {
			say(l, "elector of n%d exited: %s; restarting it and its node as a backup", n.idx, lastLine(n.elector.lastLines()))
			c.restarts++
			n.srv.kill()
			if err := c.start(n, "backup"); err == nil {
				_ = c.startElector(n)
			}
		}
	}
}

// awaitPrimary waits until exactly one node answers as primary, restarting exited electors
// (and their nodes) meanwhile.
func (c *cluster) awaitPrimary(l *ledger, limit time.Duration) (*node, error) {
	until := time.Now().Add(limit)
	for {
		c.supervise(l)
		ps := c.primaries()
		if len(ps) == 1 {
			return ps[0], nil
		}
		if len(ps) > 1 {
			return nil, fmt.Errorf("two primaries at once: n%d and n%d", ps[0].idx, ps[1].idx)
		}
		if time.Now().After(until) {
			return nil, fmt.Errorf("no node became primary within %v", limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
