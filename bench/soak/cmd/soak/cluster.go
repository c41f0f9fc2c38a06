package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"kavach.dev/bench/soak/resp"
)

// proc is one running child process (a kavach serve, an elector, etcd).
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when it exited
	mu   sync.Mutex
	tail []string // its last stderr lines
	// killed: the soak killed it (any other exit is reported).
	killed atomic.Bool
	exit   atomic.Value // string: how it exited
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *proc) lastLines() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// kill sends SIGKILL and waits for the exit (a stopped process dies too).
func (p *proc) kill() {
	if p == nil {
		return
	}
	p.killed.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// spawn starts program with args; its stderr goes to logPath, and ready is closed when a line
// containing readyText appears (never, if readyText is empty).
func spawn(name, logPath, program string, args []string, readyText string) (*proc, chan struct{}, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(lf, "# %s %s\n", program, strings.Join(args, " "))
	cmd := exec.Command(program, args...)
	cmd.Stdin = nil
	cmd.Stdout = lf
	pipe, err := cmd.StderrPipe()
	if err != nil {
		lf.Close()
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, nil, fmt.Errorf("start %s: %v", program, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		seen := false
		for sc.Scan() {
			l := sc.Text()
			fmt.Fprintln(lf, l)
			p.mu.Lock()
			p.tail = append(p.tail, l)
			if len(p.tail) > 40 {
				p.tail = p.tail[len(p.tail)-40:]
			}
			p.mu.Unlock()
			if !seen && readyText != "" && strings.Contains(l, readyText) {
				seen = true
				close(ready)
			}
		}
		err := cmd.Wait()
		p.exit.Store(fmt.Sprint(err))
		fmt.Fprintf(lf, "# exited: %v\n", err)
		lf.Close()
		close(p.done)
	}()
	return p, ready, nil
}

// node is one Kavach server's machine: its directory, RESP port and replication address,
// which stay the same across its restarts, in either role.
type node struct {
	idx     int
	dir     string
	port    int
	listen  string
	srv     *proc
	elector *proc
	starts  int
}

func (n *node) addr() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

type cluster struct {
	cfg   *config
	nodes []*node
	logs  string
	etcd  *proc
	url   string
	// restarts: electors that exited and were restarted with their nodes.
	restarts int
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func newCluster(cfg *config, root string) (*cluster, error) {
	c := &cluster{cfg: cfg, logs: filepath.Join(cfg.out, "logs")}
	if err := os.MkdirAll(c.logs, 0o755); err != nil {
		return nil, err
	}
	for i := 0; i < 3; i++ {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		l, err := freePort()
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(root, fmt.Sprintf("n%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, &node{idx: i, dir: dir, port: p, listen: "127.0.0.1:" + strconv.Itoa(l)})
	}
	return c, nil
}

// others: the replication addresses of every node but n.
func (c *cluster) others(n *node) string {
	var s []string
	for _, m := range c.nodes {
		if m != n {
			s = append(s, m.listen)
		}
	}
	return strings.Join(s, ",")
}

// start runs node n as role ("primary" with the other nodes as backups, or "backup"), and
// waits until it listens. A port still held by a dying process is retried for a while.
func (c *cluster) start(n *node, role string) error {
	args := []string{"serve", "--dir", n.dir, "--port", strconv.Itoa(n.port)}
	if role == "backup" {
		args = append(args, "--role", "backup", "--listen", n.listen)
	} else {
		args = append(args, "--replicas", c.others(n), "--write-quorum", strconv.Itoa(c.cfg.w),
			"--repl-log-mib", strconv.Itoa(c.cfg.replLogMiB))
	}
	args = append(args, "--backup-timeout-ms", strconv.Itoa(c.cfg.backupTimeoutMs))
	args = append(args, strings.Fields(c.cfg.storeArgs)...)
	until := time.Now().Add(60 * time.Second)
	for {
		n.starts++
		name := fmt.Sprintf("n%d", n.idx)
		logPath := filepath.Join(c.logs, fmt.Sprintf("%s.%02d.%s.log", name, n.starts, role))
		p, ready, err := spawn(name, logPath, c.cfg.kavach, args, "kavach: listening on")
		if err != nil {
			return err
		}
		select {
		case <-ready:
			n.srv = p
			return nil
		case <-p.done:
			t := p.lastLines()
			if strings.Contains(t, "cannot listen on") && time.Now().Before(until) {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			return fmt.Errorf("%s (%s) exited before listening: %s", name, role, t)
		case <-time.After(time.Until(until)):
			p.kill()
			return fmt.Errorf("%s (%s) did not listen within 60 s: %s", name, role, p.lastLines())
		}
	}
}

// role asks node n for INFO replication: "primary", "backup", or "" if it does not answer.
func role(n *node) string {
	cn, err := resp.Dial(n.addr(), 2*time.Second)
	if err != nil {
		return ""
	}
	defer cn.Close()
	v, err := cn.Do("INFO", "replication")
	b, ok := v.([]byte)
	if err != nil || !ok {
		return ""
	}
	s := string(b)
	switch {
	case strings.Contains(s, "kavach_role:primary"):
		return "primary"
	case strings.Contains(s, "kavach_role:backup"):
		return "backup"
	}
	return ""
}

// promote runs `kavach promote` on node n, naming the other nodes as its backups.
func (c *cluster) promote(n *node) (string, error) {
	out, err := exec.Command(c.cfg.kavach, "promote", "--port", strconv.Itoa(n.port),
		"--replicas", c.others(n), "--write-quorum", strconv.Itoa(c.cfg.w), "--timeout", "120").CombinedOutput()
	text := strings.TrimSpace(string(out))
	if err != nil {
		return text, fmt.Errorf("kavach promote on n%d: %v: %s", n.idx, err, text)
	}
	return text, nil
}

// ---- etcd mode ----

// ensureEtcd finds the etcd binary, installing Debian's etcd-server if it is missing.
func ensureEtcd() error {
	if _, err := exec.LookPath("etcd"); err == nil {
		return nil
	}
	fmt.Fprintln(os.Stderr, "soak: etcd is missing: apt-get install -y etcd-server")
	cmd := exec.Command("apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-q", "etcd-server")
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	if _, lerr := exec.LookPath("etcd"); lerr != nil {
		return fmt.Errorf("etcd-server could not be installed (%v): %s", err, lastLine(string(out)))
	}
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, "\n"); i >= 0 {
		return s[i+1:]
	}
	return s
}

func (c *cluster) startEtcd(root string) error {
	for attempt := 0; attempt < 5; attempt++ {
		cp, err := freePort()
		if err != nil {
			return err
		}
		pp, err := freePort()
		if err != nil {
			return err
		}
		url := fmt.Sprintf("http://127.0.0.1:%d", cp)
		peer := fmt.Sprintf("http://127.0.0.1:%d", pp)
		args := []string{"--name", "soak", "--data-dir", filepath.Join(root, fmt.Sprintf("etcd%d", attempt)),
			"--listen-client-urls", url, "--advertise-client-urls", url,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "soak=" + peer}
		p, ready, err := spawn("etcd", filepath.Join(c.logs, fmt.Sprintf("etcd.%d.log", attempt)), "etcd", args,
			"ready to serve client requests")
		if err != nil {
			return err
		}
		select {
		case <-ready:
			c.etcd, c.url = p, url
			return nil
		case <-p.done:
		case <-time.After(60 * time.Second):
			p.kill()
		}
	}
	return fmt.Errorf("etcd did not start in 5 attempts (logs in %s)", c.logs)
}

func (c *cluster) startElector(n *node) error {
	args := []string{"elect", "--etcd", c.url, "--cluster", "soak", "--port", strconv.Itoa(n.port),
		"--replicas", c.others(n), "--write-quorum", strconv.Itoa(c.cfg.w), "--ttl", strconv.Itoa(c.cfg.ttl)}
	n.starts++
	p, _, err := spawn(fmt.Sprintf("elector%d", n.idx),
		filepath.Join(c.logs, fmt.Sprintf("n%d.%02d.elector.log", n.idx, n.starts)), c.cfg.kavach, args, "")
	if err != nil {
		return err
	}
	n.elector = p
	return nil
}

// primaries: the nodes that answer INFO as primary.
func (c *cluster) primaries() []*node {
	var ps []*node
	for _, n := range c.nodes {
		if n.srv != nil && n.srv.alive() && role(n) == "primary" {
			ps = append(ps, n)
		}
	}
	return ps
}

// unexpected: the nodes whose server exited without the soak killing it.
func (c *cluster) unexpected() []string {
	var out []string
	for _, n := range c.nodes {
		if p := n.srv; p != nil && !p.alive() && !p.killed.Load() {
			e, _ := p.exit.Load().(string)
			out = append(out, fmt.Sprintf("n%d exited without a fault (%s; an elector's SHUTDOWN, or a signal from outside the soak): %s",
				n.idx, e, lastLine(p.lastLines())))
		}
	}
	return out
}

func (c *cluster) stopAll() {
	for _, n := range c.nodes {
		if n.elector != nil {
			n.elector.kill()
		}
		if n.srv != nil {
			n.srv.kill()
		}
	}
	if c.etcd != nil {
		c.etcd.kill()
	}
}
