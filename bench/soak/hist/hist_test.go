package hist

import (
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

func set(c int, k, v string, call, ret int64) Op {
	return Op{Client: c, Kind: "set", Key: k, Value: v, Call: call, Return: ret, Status: OK}
}

func get(c int, k, v string, call, ret int64) Op {
	return Op{Client: c, Kind: "get", Key: k, Out: v, Nil: v == "", Call: call, Return: ret, Status: OK}
}

func incr(c int, k, v string, call, ret int64) Op {
	return Op{Client: c, Kind: "incr", Key: k, Out: v, Call: call, Return: ret, Status: OK}
}

func lost(o Op) Op {
	o.Status, o.Return, o.Out, o.Err = Unknown, 0, "", "connection reset"
	return o
}

func verdict(t *testing.T, ops []Op) porcupine.CheckResult {
	t.Helper()
	for i := range ops {
		if err := ops[i].Validate(); err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
	}
	r, _ := Check(ops, 0)
	return r
}

// The canary: a read after a newer write completed sees the older value.
func TestStaleReadIsIllegal(t *testing.T) {
	h := []Op{
		set(0, "k", "a", 0, 10),
		set(1, "k", "b", 20, 30),
		get(2, "k", "a", 40, 50),
		// Another key, linearizable on its own, does not hide it.
		set(0, "j", "x", 0, 5),
		get(1, "j", "x", 6, 7),
	}
	if r := verdict(t, h); r != porcupine.Illegal {
		t.Fatalf("stale read accepted: %v", r)
	}
}

// An acknowledged write followed by a read of nothing: a lost write.
func TestLostWriteIsIllegal(t *testing.T) {
	h := []Op{set(0, "k", "a", 0, 10), get(1, "k", "", 20, 30)}
	if r := verdict(t, h); r != porcupine.Illegal {
		t.Fatalf("lost write accepted: %v", r)
	}
}

// Two increments answered the same value one after the other.
func TestRepeatedIncrIsIllegal(t *testing.T) {
	h := []Op{incr(0, "n", "1", 0, 10), incr(1, "n", "1", 20, 30)}
	if r := verdict(t, h); r != porcupine.Illegal {
		t.Fatalf("repeated incr accepted: %v", r)
	}
}

// Concurrent operations, writes of unknown outcome that did or did not happen, increments
// with a lost answer: all linearizable.
func TestLegalHistoryIsAccepted(t *testing.T) {
	h := []Op{
		set(0, "k", "a", 0, 10),
		set(1, "k", "b", 5, 25),  // concurrent with the next read
		get(2, "k", "a", 12, 20), // b not yet visible
		get(2, "k", "b", 30, 40),
		lost(set(0, "k", "c", 45, 0)), // may have happened...
		get(1, "k", "b", 50, 60),      // ...not yet
		get(2, "k", "c", 70, 80),      // ...now it has
		lost(set(1, "u", "z", 0, 0)),  // never seen: as if it did not happen
		get(0, "u", "", 90, 95),
		incr(0, "n", "1", 0, 10),
		lost(incr(1, "n", "", 20, 0)),
		incr(2, "n", "3", 30, 40), // the lost one happened
		incr(0, "m", "1", 0, 10),
		lost(incr(1, "m", "", 20, 0)),
		incr(2, "m", "2", 30, 40), // the lost one did not (yet)
		lost(get(1, "k", "", 100, 0)),
	}
	if r := verdict(t, h); r != porcupine.Ok {
		t.Fatalf("legal history refused: %v", r)
	}
}

func TestLoadValidates(t *testing.T) {
	good := `{"client":0,"op":"set","key":"k","value":"a","call":1,"ret":2,"status":"ok"}` + "\n"
	ops, err := Load(strings.NewReader(good))
	if err != nil || len(ops) != 1 {
		t.Fatalf("Load(good) = %v, %v", ops, err)
	}
	for _, bad := range []string{
		`{"client":0,"op":"del","key":"k","call":1,"ret":2,"status":"ok"}`,
		`{"client":0,"op":"set","key":"k","call":1,"ret":2,"status":"ok"}`,
		`{"client":0,"op":"get","key":"k","call":5,"ret":2,"status":"ok"}`,
		`{"client":0,"op":"incr","key":"k","out":"x","call":1,"ret":2,"status":"ok"}`,
		`{"client":0,"op":"get","key":"k","call":1,"ret":2,"status":"maybe"}`,
		`not json`,
	} {
		if _, err := Load(strings.NewReader(good + bad + "\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("Load accepted %s (err %v)", bad, err)
		}
	}
}
