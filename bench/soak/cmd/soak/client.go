package main

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"kavach.dev/bench/soak/hist"
	"kavach.dev/bench/soak/resp"
)

// write is one SET in the ledger.
type write struct {
	token     string
	call, ret int64 // ret 0: no definite outcome
	acked     bool
}

// ledger: every write a client sent, by key, and the history file.
type ledger struct {
	start time.Time
	mu    sync.Mutex
	sets  map[string][]write
	// Counters: the largest value an acknowledged INCR answered, and how many were sent.
	incrMax  map[string]int64
	incrSent map[string]int64
	// Refusals by their text (the first 100 bytes).
	refusals map[string]int64

	hmu sync.Mutex
	enc *json.Encoder
	hf  *os.File

	attempted, acked, refused, unknown, readonly atomic.Int64
	gets, getErrs                                atomic.Int64
	ackedBytes, attemptedBytes                   atomic.Int64
	firstRefusal                                 atomic.Value // string
	firstRefusalAt                               atomic.Int64
	quorumLost, logFull                          atomic.Bool
	corrupt                                      atomic.Value // string: a value that is not what was written
}

func newLedger(path string) (*ledger, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &ledger{start: time.Now(), sets: map[string][]write{}, incrMax: map[string]int64{},
		incrSent: map[string]int64{}, refusals: map[string]int64{}, enc: json.NewEncoder(f), hf: f}, nil
}

func (l *ledger) now() int64 { return int64(time.Since(l.start)) }

func (l *ledger) record(o hist.Op) {
	l.hmu.Lock()
	_ = l.enc.Encode(&o)
	l.hmu.Unlock()
}

func (l *ledger) close() error { return l.hf.Close() }

// The value written for a token: the token, a colon, and filler derived from it up to size
// bytes, so that a read checks every byte.
func pad(token string, size int) string {
	var b strings.Builder
	b.WriteString(token)
	b.WriteByte(':')
	for i := 0; b.Len() < size; i++ {
		b.WriteByte('a' + byte((int(token[i%len(token)])+i)%26))
	}
	return b.String()
}

// unpad: the token of a value read, or an error if the value is not one the soak writes.
func unpad(v []byte, size int) (string, error) {
	s := string(v)
	i := strings.IndexByte(s, ':')
	if i <= 0 || pad(s[:i], size) != s {
		if len(s) > 40 {
			s = s[:40] + "..."
		}
		return "", fmt.Errorf("value %q is not one this soak wrote", s)
	}
	return s[:i], nil
}

// workers run the clients. Every operation holds gate for reading; the controller takes it
// for writing to pause them (in-flight operations finish or time out first).
type workers struct {
	cfg     *config
	l       *ledger
	gate    sync.RWMutex
	primary atomic.Value // string: the primary's RESP address, "" while there is none
	// gen counts the changes of primary (restarts included); a client that was refused
	// because the primary latched failed waits for the next one.
	gen  atomic.Int64
	stop atomic.Bool
	wg   sync.WaitGroup
}

func (w *workers) setPrimary(addr string) {
	w.primary.Store(addr)
	w.gen.Add(1)
}

func regKey(i int) string { return "k" + strconv.Itoa(i) }
func ctrKey(i int) string { return "n" + strconv.Itoa(i) }

func (w *workers) run(id int, seed int64) {
	defer w.wg.Done()
	r := rand.New(rand.NewSource(seed))
	var cn *resp.Conn
	var at string
	seq := 0
	drop := func() {
		if cn != nil {
			cn.Close()
			cn = nil
		}
	}
	defer drop()
	for !w.stop.Load() {
		w.gate.RLock()
		addr, _ := w.primary.Load().(string)
		if addr == "" {
			w.gate.RUnlock()
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if cn == nil || at != addr {
			drop()
			c, err := resp.Dial(addr, w.cfg.opTimeout)
			if err != nil {
				w.gate.RUnlock()
				time.Sleep(50 * time.Millisecond)
				continue
			}
			cn, at = c, addr
		}
		gen := w.gen.Load()
		ok, latched := w.op(id, r, cn, &seq)
		w.gate.RUnlock()
		if !ok {
			drop()
			time.Sleep(50 * time.Millisecond)
		}
		// A primary that refused a write for a lost quorum (or a full log) refuses everything
		// until it recovers: stop writing to it until the controller has replaced it, so
		// that its refusals do not fill the history.
		for latched && w.gen.Load() == gen && !w.stop.Load() {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// op does one random operation on cn and records it; false if the connection should be
// dropped, and whether the primary refused it as one that needs a restart.
func (w *workers) op(id int, r *rand.Rand, cn *resp.Conn, seq *int) (keep, latched bool) {
	l := w.l
	x := r.Intn(100)
	var o hist.Op
	o.Client = id
	switch {
	case x < 45 || w.cfg.counters == 0 && x < 80:
		*seq++
		o.Kind, o.Key = "set", regKey(r.Intn(w.cfg.keys))
		o.Value = fmt.Sprintf("c%d-%d", id, *seq)
	case x < 80:
		o.Kind = "get"
		if w.cfg.counters > 0 && r.Intn(4) == 0 {
			o.Key = ctrKey(r.Intn(w.cfg.counters))
		} else {
			o.Key = regKey(r.Intn(w.cfg.keys))
		}
	default:
		o.Kind, o.Key = "incr", ctrKey(r.Intn(w.cfg.counters))
	}
	var v any
	var err error
	var size int64
	o.Call = l.now()
	switch o.Kind {
	case "set":
		val := pad(o.Value, w.cfg.valueSize)
		size = int64(len(o.Key) + len(val))
		l.attempted.Add(1)
		l.attemptedBytes.Add(size)
		v, err = cn.Do("SET", o.Key, val)
	case "get":
		v, err = cn.Do("GET", o.Key)
	case "incr":
		size = int64(len(o.Key) + 8)
		l.attempted.Add(1)
		l.attemptedBytes.Add(size)
		l.mu.Lock()
		l.incrSent[o.Key]++
		l.mu.Unlock()
		v, err = cn.Do("INCR", o.Key)
	}
	ret := l.now()
	keep = true
	if err != nil {
		// Any failure drops the connection and backs off, so that a primary refusing every
		// write does not fill the history with them (each write without a definite outcome
		// widens porcupine's search).
		o.Status, o.Err, keep = hist.Unknown, err.Error(), false
		if text, isReply := resp.IsReply(err); isReply {
			if o.Kind != "get" {
				latched = w.refusal(text)
			} else {
				latched = strings.Contains(text, "restart this primary")
				if latched {
					l.quorumLost.Store(true)
				}
			}
		} else if o.Kind != "get" {
			l.unknown.Add(1)
		}
		if o.Kind == "get" {
			l.getErrs.Add(1)
		}
	} else {
		o.Status, o.Return = hist.OK, ret
		switch o.Kind {
		case "set":
			if s, _ := v.(string); s != "OK" {
				o.Status, o.Return, o.Err = hist.Unknown, 0, fmt.Sprintf("SET answered %v", v)
				keep = false
			}
		case "get":
			l.gets.Add(1)
			switch b := v.(type) {
			case nil:
				o.Nil = true
			case []byte:
				if strings.HasPrefix(o.Key, "n") {
					o.Out = string(b)
					if _, perr := strconv.ParseInt(o.Out, 10, 64); perr != nil {
						l.corrupt.CompareAndSwap(nil, fmt.Sprintf("counter %s holds %q", o.Key, o.Out))
					}
				} else if t, uerr := unpad(b, w.cfg.valueSize); uerr != nil {
					l.corrupt.CompareAndSwap(nil, fmt.Sprintf("%s: %v", o.Key, uerr))
					o.Out = "!" + uerr.Error()
				} else {
					o.Out = t
				}
			default:
				o.Status, o.Return, o.Err = hist.Unknown, 0, fmt.Sprintf("GET answered %v", v)
				keep = false
			}
		case "incr":
			n, isInt := v.(int64)
			if !isInt {
				o.Status, o.Return, o.Err = hist.Unknown, 0, fmt.Sprintf("INCR answered %v", v)
				keep = false
			} else {
				o.Out = strconv.FormatInt(n, 10)
			}
		}
	}
	if o.Kind != "get" && o.Status == hist.OK {
		l.acked.Add(1)
		l.ackedBytes.Add(size)
	}
	l.mu.Lock()
	switch o.Kind {
	case "set":
		l.sets[o.Key] = append(l.sets[o.Key], write{token: o.Value, call: o.Call, ret: o.Return, acked: o.Status == hist.OK})
	case "incr":
		if o.Status == hist.OK {
			n, _ := strconv.ParseInt(o.Out, 10, 64)
			l.incrMax[o.Key] = max(l.incrMax[o.Key], n)
		}
	}
	l.mu.Unlock()
	l.record(o)
	return keep, latched
}

// refusal counts an error reply to a write; true if the primary now refuses writes until it
// recovers.
func (w *workers) refusal(text string) bool {
	l := w.l
	if strings.HasPrefix(text, "READONLY") {
		l.readonly.Add(1)
		return false
	}
	l.refused.Add(1)
	kind := text
	if len(kind) > 100 {
		kind = kind[:100] + "..."
	}
	l.mu.Lock()
	l.refusals[kind]++
	l.mu.Unlock()
	if l.firstRefusal.CompareAndSwap(nil, text) {
		l.firstRefusalAt.Store(l.now())
	}
	switch {
	case strings.Contains(text, "replication log is full"):
		l.logFull.Store(true)
		return true
	case strings.Contains(text, "replicat") || strings.Contains(text, "restart this primary"):
		// A lost write quorum, or a primary latched failed after one: it refuses writes
		// until it recovers.
		l.quorumLost.Store(true)
		return true
	}
	return false
}

// loss is one acknowledged write the ledger found missing.
type loss struct {
	Key      string  `json:"key"`
	Expected string  `json:"expected"`   // the latest acknowledged value's token
	AckedAtS float64 `json:"acked_at_s"` // when it was acknowledged (s since the start)
	Read     string  `json:"read"`       // what the primary answered
	Reason   string  `json:"reason"`
}

// audit reads every key from addr (clients paused) and checks it against the ledger; the
// reads go into the history as client id `id`. It returns the losses and the keys it could
// not read.
func (w *workers) audit(addr string, id int) ([]loss, []string) {
	l := w.l
	var losses []loss
	var unread []string
	cn, err := resp.Dial(addr, w.cfg.opTimeout)
	if err != nil {
		return nil, []string{"all: " + err.Error()}
	}
	defer func() { cn.Close() }()
	fails := 0 // reads failed in a row: after 5, the rest are skipped
	get := func(key string) (any, hist.Op, error) {
		if fails >= 5 {
			return nil, hist.Op{}, fmt.Errorf("not read: the 5 reads before it failed")
		}
		var v any
		var err error
		var o hist.Op
		for try := 0; try < 3; try++ {
			o = hist.Op{Client: id, Kind: "get", Key: key, Call: l.now()}
			v, err = cn.Do("GET", key)
			if err == nil {
				o.Status, o.Return = hist.OK, l.now()
				fails = 0
				return v, o, nil
			}
			o.Status, o.Err = hist.Unknown, err.Error()
			l.record(o)
			cn.Close()
			time.Sleep(200 * time.Millisecond)
			if c, derr := resp.Dial(addr, w.cfg.opTimeout); derr == nil {
				cn = c
			}
		}
		fails++
		return nil, o, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := 0; i < w.cfg.keys; i++ {
		key := regKey(i)
		v, o, err := get(key)
		if err != nil {
			unread = append(unread, key+": "+err.Error())
			continue
		}
		ws := l.sets[key]
		var latest *write
		for j := range ws {
			if ws[j].acked && (latest == nil || ws[j].ret > latest.ret) {
				latest = &ws[j]
			}
		}
		bad := func(read, why string) {
			ls := loss{Key: key, Read: read, Reason: why}
			if latest != nil {
				ls.Expected, ls.AckedAtS = latest.token, float64(latest.ret)/1e9
			}
			losses = append(losses, ls)
		}
		switch b := v.(type) {
		case nil:
			o.Nil = true
			if latest != nil {
				bad("nil", "an acknowledged write is gone: the key is absent")
			}
		case []byte:
			t, uerr := unpad(b, w.cfg.valueSize)
			if uerr != nil {
				o.Out = "!" + uerr.Error()
				bad(o.Out, "the value is not one this soak wrote")
				break
			}
			o.Out = t
			var got *write
			for j := range ws {
				if ws[j].token == t {
					got = &ws[j]
				}
			}
			if got == nil {
				bad(t, "no client wrote this value to this key")
				break
			}
			// Stale: an acknowledged write began after the one read had been acknowledged.
			for j := range ws {
				if ws[j].acked && got.acked && ws[j].call > got.ret {
					bad(t, fmt.Sprintf("stale: %s was acknowledged at %.3f s, after %s had been", ws[j].token,
						float64(ws[j].ret)/1e9, t))
					break
				}
			}
		default:
			unread = append(unread, fmt.Sprintf("%s: GET answered %v", key, v))
			continue
		}
		l.record(o)
	}
	for i := 0; i < w.cfg.counters; i++ {
		key := ctrKey(i)
		v, o, err := get(key)
		if err != nil {
			unread = append(unread, key+": "+err.Error())
			continue
		}
		var n int64
		switch b := v.(type) {
		case nil:
			o.Nil = true
		case []byte:
			o.Out = string(b)
			p, perr := strconv.ParseInt(o.Out, 10, 64)
			if perr != nil {
				losses = append(losses, loss{Key: key, Read: o.Out, Reason: "a counter that is not an integer"})
				l.record(o)
				continue
			}
			n = p
		}
		l.record(o)
		if m := l.incrMax[key]; n < m {
			losses = append(losses, loss{Key: key, Expected: strconv.FormatInt(m, 10), Read: strconv.FormatInt(n, 10),
				Reason: "an acknowledged INCR is gone: the counter is below a value INCR answered"})
		} else if n > l.incrSent[key] {
			losses = append(losses, loss{Key: key, Expected: "<= " + strconv.FormatInt(l.incrSent[key], 10),
				Read: strconv.FormatInt(n, 10), Reason: "the counter is above the number of INCRs sent"})
		}
	}
	return losses, unread
}
