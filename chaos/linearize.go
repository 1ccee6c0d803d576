package chaos

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The fencing model checked with porcupine: per key (a partition), the
// grants of the lock form a history of operations "grant → fence f" over
// a register holding the last fence; a grant is legal when f is greater
// than the register, which then holds f. The history is linearizable iff
// the fences can be ordered, consistently with real time (a grant that
// returned before another was invoked comes first), so that they strictly
// increase — the fencing-token guarantee (I2). A lock's mutual exclusion
// itself is not a sequential object (leases end by time, not by an
// operation), so I1 is checked directly on intervals instead.
//
// Porcupine also draws the timeline: every client's grants and releases,
// with annotations for the faults, the leases, the Resource's writes and
// the violations found.

type fenceInput struct {
	Client int
	Kind   string // "grant" or "release"
	Key    string
}

var fenceModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(fenceInput).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return int64(0) },
	Step: func(state, input, output any) (bool, any) {
		in := input.(fenceInput)
		if in.Kind != "grant" {
			return true, state
		}
		f := output.(int64)
		if f > state.(int64) {
			return true, f
		}
		return false, state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(fenceInput)
		if in.Kind == "grant" {
			return fmt.Sprintf("grant %s → fence %d", in.Key, output.(int64))
		}
		return "release " + in.Key
	},
	DescribeState: func(state any) string { return fmt.Sprintf("last fence %d", state.(int64)) },
}

// Linearize checks the fencing model over h's grants and releases (probes
// left out: every probe has a key of its own) with porcupine, bounded by
// timeout. It returns porcupine's verdict and the information its
// visualization needs.
func Linearize(h History, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	var ops []porcupine.Operation
	for i := range h.Ops {
		op := &h.Ops[i]
		if op.Probe {
			continue
		}
		switch {
		case op.Kind == "acquire" && op.OK:
			ops = append(ops, porcupine.Operation{
				ClientId: op.Client, Input: fenceInput{op.Client, "grant", op.Key}, Output: op.Fence,
				Call: int64(op.Invoke), Return: int64(op.Return), Metadata: op.Via,
			})
		case op.Kind == "release":
			ops = append(ops, porcupine.Operation{
				ClientId: op.Client, Input: fenceInput{op.Client, "release", op.Key}, Output: op.OK,
				Call: int64(op.Invoke), Return: int64(op.Return), Metadata: op.Via,
			})
		}
	}
	return porcupine.CheckOperationsVerbose(fenceModel, ops, timeout)
}

// WriteTimeline writes porcupine's HTML visualization of h to path, with
// faults, leases, resource writes and violations as annotations.
func WriteTimeline(path string, h History, info porcupine.LinearizationInfo, violations []Violation) error {
	var anns []porcupine.Annotation
	for _, e := range h.Events {
		tag := "faults"
		color := "#fde2e2"
		switch e.Kind {
		case "heal", "settled":
			color = "#e2f5e2"
		case "note":
			tag, color = "notes", "#eeeeee"
		}
		what := e.What
		if len(e.Masters) > 0 {
			what += fmt.Sprintf(" (masters %v", e.Masters)
			if e.View != AllViews {
				what += fmt.Sprintf(", view %d only", e.View)
			}
			what += ")"
		}
		anns = append(anns, porcupine.Annotation{Tag: tag, Start: int64(e.At), End: int64(max(e.Done, e.At+time.Millisecond)), Description: e.Kind + ": " + e.What, Details: what, BackgroundColor: color})
	}
	for _, ls := range leases(h) {
		for _, l := range ls {
			anns = append(anns, porcupine.Annotation{
				ClientId: l.op.Client, Start: int64(l.start), End: int64(l.end),
				Description:     fmt.Sprintf("holds %s (fence %d)", l.op.Key, l.op.Fence),
				Details:         fmt.Sprintf("lease of grant #%d: from the grant's return to min(release, end of validity)", l.op.ID),
				BackgroundColor: "#dbe9ff",
			})
		}
	}
	for _, w := range h.Writes {
		color, verdict := "#d9f2d9", "accepted"
		if !w.OK {
			color, verdict = "#ffb3b3", "REJECTED ("+w.Reason+")"
		}
		anns = append(anns, porcupine.Annotation{
			Tag: "resource " + w.Key, Start: int64(w.At), End: int64(w.At + time.Millisecond),
			Description:     fmt.Sprintf("%s f=%d c%d", w.Phase, w.Fence, w.Client),
			Details:         fmt.Sprintf("client %d writes %s of grant #%d with fence %d: %s", w.Client, w.Phase, w.Grant, w.Fence, verdict),
			BackgroundColor: color,
		})
	}
	at := map[int]*Op{}
	for i := range h.Ops {
		at[h.Ops[i].ID] = &h.Ops[i]
	}
	for _, v := range violations {
		var from, to time.Duration
		for i, id := range v.Ops {
			if op := at[id]; op != nil {
				if i == 0 || op.Invoke < from {
					from = op.Invoke
				}
				to = max(to, op.Return)
			}
		}
		if len(v.Ops) == 0 {
			from, to = h.End, h.End+time.Millisecond
		}
		anns = append(anns, porcupine.Annotation{
			Tag: "violations", Start: int64(from), End: int64(max(to, from+time.Millisecond)),
			Description: v.Invariant, Details: v.Detail, BackgroundColor: "#ff6666", TextColor: "#ffffff",
		})
	}
	info.AddAnnotations(anns)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := porcupine.Visualize(fenceModel, info, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// describeFaults is the faults column of the report.
func describeFaults(events []Event) string {
	var parts []string
	for _, e := range events {
		if e.Kind == "fault" {
			parts = append(parts, e.What)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}
