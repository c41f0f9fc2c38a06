// vsredis measures SET throughput and latency against one RESP server: --conns connections,
// each sending SET of a --value-size value to one of --keys keys, then (with --wait N) `WAIT
// N 0`, and only then its next SET. One operation is the SET and its WAIT. It prints one JSON
// line: operations, operations per second, p50/p99/max latency in microseconds, errors.
// Exit status: 0 measured, 1 a reply was wrong (an error, or WAIT counted fewer than N
// replicas), 2 could not run.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"kavach.dev/bench/soak/resp"
)

type result struct {
	Label   string  `json:"label"`
	Conns   int     `json:"conns"`
	Wait    int     `json:"wait"`
	Seconds float64 `json:"seconds"`
	Ops     int     `json:"ops"`
	OpsPerS float64 `json:"ops_per_s"`
	P50us   float64 `json:"p50_us"`
	P99us   float64 `json:"p99_us"`
	MaxUs   float64 `json:"max_us"`
	Errors  int     `json:"errors"`
	First   string  `json:"first_error,omitempty"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "server address")
	conns := flag.Int("conns", 1, "connections, one goroutine each")
	secs := flag.Float64("seconds", 5, "measured seconds (after --warmup)")
	warm := flag.Float64("warmup", 1, "seconds of load before measuring")
	size := flag.Int("value-size", 64, "bytes of each value")
	keys := flag.Int("keys", 10000, "distinct keys")
	wait := flag.Int("wait", 0, "send WAIT N 0 after each SET (0: no WAIT)")
	label := flag.String("label", "", "label copied into the output")
	flag.Parse()
	if *conns < 1 || *secs <= 0 || *warm < 0 || *size < 1 || *keys < 1 || *wait < 0 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "vsredis: bad arguments (see -h)")
		os.Exit(2)
	}
	val := strings.Repeat("v", *size)
	var mu sync.Mutex
	var lats []time.Duration
	errs, first := 0, ""
	start := time.Now()
	measureFrom := start.Add(time.Duration(*warm * float64(time.Second)))
	end := measureFrom.Add(time.Duration(*secs * float64(time.Second)))
	var wg sync.WaitGroup
	fail := make(chan error, *conns)
	for i := 0; i < *conns; i++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			c, err := resp.Dial(*addr, 30*time.Second)
			if err != nil {
				fail <- err
				return
			}
			defer c.Close()
			r := rand.New(rand.NewSource(int64(id)))
			var mine []time.Duration
			myErrs, myFirst := 0, ""
			for {
				t := time.Now()
				if t.After(end) {
					break
				}
				k := "key:" + strconv.Itoa(r.Intn(*keys))
				v, err := c.Do("SET", k, val)
				if err == nil && v != "OK" {
					err = fmt.Errorf("SET answered %v", v)
				}
				if err == nil && *wait > 0 {
					var n any
					n, err = c.Do("WAIT", strconv.Itoa(*wait), "0")
					if got, ok := n.(int64); err == nil && (!ok || got < int64(*wait)) {
						err = fmt.Errorf("WAIT %d 0 answered %v", *wait, n)
					}
				}
				d := time.Since(t)
				if err != nil {
					myErrs++
					if myFirst == "" {
						myFirst = err.Error()
					}
					if _, isReply := resp.IsReply(err); !isReply {
						break
					}
					continue
				}
				if t.After(measureFrom) {
					mine = append(mine, d)
				}
			}
			mu.Lock()
			lats = append(lats, mine...)
			errs += myErrs
			if first == "" {
				first = myFirst
			}
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	close(fail)
	if err := <-fail; err != nil {
		fmt.Fprintf(os.Stderr, "vsredis: connect %s: %v\n", *addr, err)
		os.Exit(2)
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	res := result{Label: *label, Conns: *conns, Wait: *wait, Seconds: *secs, Ops: len(lats), Errors: errs, First: first}
	if n := len(lats); n > 0 {
		res.OpsPerS = float64(n) / *secs
		q := func(p float64) float64 { return float64(lats[min(n-1, int(p*float64(n)))].Nanoseconds()) / 1e3 }
		res.P50us, res.P99us, res.MaxUs = q(0.50), q(0.99), float64(lats[n-1].Nanoseconds())/1e3
	}
	b, _ := json.Marshal(&res)
	fmt.Println(string(b))
	if errs > 0 {
		os.Exit(1)
	}
}
