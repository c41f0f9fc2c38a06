// check reads a soak history (JSON lines) and checks it for linearizability per key with
// porcupine. Exit status: 0 linearizable, 1 not linearizable (the visualization is written),
// 2 could not run (unreadable history, or porcupine ran out of --timeout or --max-mib).
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/anishathalye/porcupine"

	"kavach.dev/bench/soak/hist"
)

func main() {
	histPath := flag.String("history", "", "history file (JSON lines from soak)")
	html := flag.String("html", "", "where to write porcupine's visualization when the history is not linearizable (default: HISTORY.html)")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up (exit 2) after this long; 0: no limit")
	maxMiB := flag.Uint64("max-mib", 4096, "give up (exit 2) when the checker's heap passes this many MiB")
	flag.Parse()
	if *histPath == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: check --history FILE [--html FILE] [--timeout DUR]")
		os.Exit(2)
	}
	ops, err := hist.LoadFile(*histPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "check: cannot read the history: %v\n", err)
		os.Exit(2)
	}
	keys := map[string]bool{}
	unknown := 0
	for _, o := range ops {
		keys[o.Key] = true
		if o.Status != hist.OK {
			unknown++
		}
	}
	// Porcupine's search can take a lot of memory on histories with many writes of unknown
	// outcome: give up before the machine runs out.
	go func() {
		var m runtime.MemStats
		for {
			time.Sleep(500 * time.Millisecond)
			runtime.ReadMemStats(&m)
			if m.HeapAlloc>>20 > *maxMiB {
				fmt.Printf("check: gave up: porcupine's heap passed --max-mib %d MiB (%d operations, %d without a definite outcome)\n",
					*maxMiB, len(ops), unknown)
				os.Exit(2)
			}
		}
	}()
	t0 := time.Now()
	res, info := hist.Check(ops, *timeout)
	took := time.Since(t0)
	fmt.Printf("check: %s: %d operations (%d without a definite outcome) on %d keys, porcupine %v in %.2f s\n",
		*histPath, len(ops), unknown, len(keys), res, took.Seconds())
	switch res {
	case porcupine.Ok:
		fmt.Println("check: ok: linearizable")
		os.Exit(0)
	case porcupine.Illegal:
		out := *html
		if out == "" {
			out = *histPath + ".html"
		}
		if err := porcupine.VisualizePath(hist.Model, info, out); err != nil {
			fmt.Printf("check: illegal: not linearizable (visualization failed: %v)\n", err)
		} else {
			fmt.Printf("check: illegal: not linearizable; visualization in %s\n", out)
		}
		os.Exit(1)
	default:
		fmt.Printf("check: porcupine gave no answer within %v\n", *timeout)
		os.Exit(2)
	}
}
