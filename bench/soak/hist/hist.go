// Package hist holds the soak's history (one JSON object per client operation) and checks it
// for linearizability per key with porcupine.
//
// Model: every key is a register holding a string, absent at first. SET writes it, GET reads
// it (absent reads as nil), INCR reads it as an integer (absent is 0), adds one and answers the
// new value. A write whose outcome is unknown (a timeout, a lost connection, an error reply:
// the docs say a failed write may have reached some copies) is given no return: porcupine may
// place it anywhere after its call, including after everything else, which is the same as not
// having happened. A read that failed has no effect on any state and is left out.
package hist

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"
)

// Op is one client operation, as the soak driver records it.
type Op struct {
	Client int    `json:"client"`
	Kind   string `json:"op"`              // "set", "get" or "incr"
	Key    string `json:"key"`             // the key
	Value  string `json:"value,omitempty"` // set: the token written
	Call   int64  `json:"call"`            // ns since the run started, before the request was sent
	Return int64  `json:"ret"`             // ns since the run started, after the reply (0 if none)
	Status string `json:"status"`          // "ok", "unknown" (no reply or an error reply)
	Out    string `json:"out,omitempty"`   // get: the token read; incr: the new value
	Nil    bool   `json:"nil,omitempty"`   // get: the key was absent
	Err    string `json:"err,omitempty"`   // what went wrong, for status "unknown"
}

// Statuses.
const (
	OK      = "ok"
	Unknown = "unknown"
)

// Validate says what is wrong with op, if anything.
func (o *Op) Validate() error {
	switch o.Kind {
	case "set":
		if o.Value == "" {
			return fmt.Errorf("set of %q without a value", o.Key)
		}
	case "get", "incr":
	default:
		return fmt.Errorf("unknown operation %q", o.Kind)
	}
	if o.Key == "" {
		return fmt.Errorf("%s without a key", o.Kind)
	}
	if o.Client < 0 || o.Client > 1<<20 {
		return fmt.Errorf("client %d out of range 0..%d", o.Client, 1<<20)
	}
	switch o.Status {
	case OK:
		if o.Return < o.Call {
			return fmt.Errorf("%s %q returns at %d before its call at %d", o.Kind, o.Key, o.Return, o.Call)
		}
		if o.Kind == "incr" {
			if _, err := strconv.ParseInt(o.Out, 10, 64); err != nil {
				return fmt.Errorf("incr %q answered %q, not an integer", o.Key, o.Out)
			}
		}
	case Unknown:
	default:
		return fmt.Errorf("unknown status %q", o.Status)
	}
	if o.Call < 0 {
		return fmt.Errorf("negative call time %d", o.Call)
	}
	return nil
}

// Load reads a history written as JSON lines.
func Load(r io.Reader) ([]Op, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var ops []Op
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var o Op
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			return nil, fmt.Errorf("line %d: not a history record: %v", line, err)
		}
		if err := o.Validate(); err != nil {
			return nil, fmt.Errorf("line %d: %v", line, err)
		}
		ops = append(ops, o)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("after line %d: %v", line, err)
	}
	return ops, nil
}

// LoadFile reads a history file.
func LoadFile(path string) ([]Op, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ops, err := Load(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return ops, nil
}

type input struct {
	Kind, Key, Value string
}

type output struct {
	Unknown bool
	Nil     bool
	Value   string
}

// Model is the register model, partitioned by key. Its state is the key's value, "" for absent
// (the driver never writes an empty value).
var Model = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, o := range h {
			k := o.Input.(input).Key
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], o)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, in, out any) (bool, any) {
		s, i, o := state.(string), in.(input), out.(output)
		switch i.Kind {
		case "set":
			return true, i.Value
		case "get":
			if o.Nil {
				return s == "", s
			}
			return o.Value == s, s
		case "incr":
			n := int64(0)
			if s != "" {
				v, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					return false, s
				}
				n = v
			}
			next := strconv.FormatInt(n+1, 10)
			if o.Unknown {
				return true, next
			}
			return o.Value == next, next
		}
		return false, s
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(input), out.(output)
		res := o.Value
		switch {
		case o.Unknown:
			res = "?"
		case o.Nil:
			res = "nil"
		case i.Kind == "set":
			res = "ok"
		}
		if i.Kind == "set" {
			return fmt.Sprintf("set(%s, %s) -> %s", i.Key, i.Value, res)
		}
		return fmt.Sprintf("%s(%s) -> %s", i.Kind, i.Key, res)
	},
	DescribeState: func(s any) string {
		if s.(string) == "" {
			return "absent"
		}
		return s.(string)
	},
}

// Operations turns a history into porcupine's operations: failed reads are dropped, writes
// of unknown outcome return after everything else.
func Operations(ops []Op) []porcupine.Operation {
	var end int64
	for _, o := range ops {
		end = max(end, o.Call, o.Return)
	}
	out := make([]porcupine.Operation, 0, len(ops))
	for _, o := range ops {
		in := input{Kind: o.Kind, Key: o.Key, Value: o.Value}
		if o.Status != OK {
			if o.Kind == "get" {
				continue
			}
			out = append(out, porcupine.Operation{ClientId: o.Client, Input: in, Call: o.Call,
				Output: output{Unknown: true}, Return: end + 1})
			continue
		}
		out = append(out, porcupine.Operation{ClientId: o.Client, Input: in, Call: o.Call,
			Output: output{Nil: o.Nil, Value: o.Out}, Return: o.Return})
	}
	return out
}

// Check checks ops; timeout 0 means none. The result is porcupine.Ok, Illegal or Unknown
// (timed out).
func Check(ops []Op, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(Model, Operations(ops), timeout)
}
