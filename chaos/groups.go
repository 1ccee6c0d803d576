package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/redlockd/redlockd/redlock"
)

// FaultGroups is not a fault but a shape: the target has two or more
// master groups (ProcessOptions.Groups), which the group rows need.
const FaultGroups FaultKind = "master-groups"

// MasterGrouper is a Target whose masters form several independent groups,
// each with its own quorum, and whose daemons place keys over them by
// redlock.Placement over the names g0, g1, … (groupName).
type MasterGrouper interface {
	// MasterGroups returns the masters (indices below Masters) of each
	// group, in group order.
	MasterGroups() [][]int
}

// groupName is the name of group i, as the targets' daemons name it.
func groupName(i int) string { return "g" + strconv.Itoa(i) }

func groupNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = groupName(i)
	}
	return out
}

// masterGroups is t's groups: MasterGroups when it has more than one, else
// one group of every master.
func masterGroups(t Target) [][]int {
	if mg, ok := t.(MasterGrouper); ok {
		if gs := mg.MasterGroups(); len(gs) > 1 {
			return gs
		}
	}
	return [][]int{indices(t.Masters())}
}

// MasterGroups implements MasterGrouper: Masters masters per group, group
// after group.
func (t *ProcessTarget) MasterGroups() [][]int {
	var out [][]int
	for g := range t.opts.Groups {
		var ms []int
		for i := range t.opts.Masters {
			ms = append(ms, g*t.opts.Masters+i)
		}
		out = append(out, ms)
	}
	return out
}

// groupAddrs is MasterAddrs(view) split by group.
func (t *ProcessTarget) groupAddrs(view int) [][]string {
	addrs := t.MasterAddrs(view)
	var out [][]string
	for _, ms := range t.MasterGroups() {
		var ga []string
		for _, m := range ms {
			ga = append(ga, addrs[m])
		}
		out = append(out, ga)
	}
	return out
}

// GroupOf returns the index of the master group that key (a drill key, in
// the target's key space) is placed on; 0 with one group.
func (d *Drill) GroupOf(key string) int {
	if d.place == nil {
		return 0
	}
	return d.place.Group(d.T.Space().LockKey(key))
}

// Group returns the masters of group g.
func (d *Drill) Group(g int) []int { return slices.Clone(d.groups[g]) }

// libGroups returns, for view v's library clients, a redlock.Groups over
// the groups named, each the view's Client of that group. The Groups is
// never closed: the clients are the drill's (Drill.close closes them).
func (d *Drill) libGroups(v int, groups ...int) (*redlock.Groups, error) {
	d.clientsMu.RLock()
	cs := d.clients[v]
	d.clientsMu.RUnlock()
	var gs []redlock.Group
	for _, g := range groups {
		gs = append(gs, redlock.Group{Name: groupName(g), Client: cs[g]})
	}
	return redlock.NewGroups(gs...)
}

// GroupMatrix returns the rows that need two master groups
// (ProcessOptions.Groups 2): a group's minority, then its majority, failed
// while the other group is untouched, and a change of master groups (one
// group to two) under load, with its negative control.
func GroupMatrix() []*Scenario {
	return []*Scenario{
		groupWindow("groups-kill-minority", "two groups of five: SIGKILL two masters of g0 and restart them empty; g1 untouched, its keys keep every grant",
			[]int{0, 1}, FaultKill, kill, restart),
		groupWindow("groups-pause-majority", "two groups of five: SIGSTOP three masters of g0 beyond the TTL: g0's keys fail closed and fast; g1 untouched, its keys keep every grant",
			[]int{0, 2, 4}, FaultPause, pause, resume),
		groupChange(true),
		groupChange(false),
	}
}

// groupWindow is a workload row on two master groups: the fault hits the
// masters of g0 given (indices within g0) over the middle half; Verify
// checks that g1, untouched, served every acquire of its keys.
func groupWindow(name, summary string, inG0 []int, kind FaultKind, apply, heal masterFn) *Scenario {
	return &Scenario{
		Name: name, Summary: summary, Needs: []FaultKind{FaultGroups, kind}, Workload: true,
		// Eight keys, so that both groups hold some (Prepare checks).
		Keys:    8,
		Prepare: func(_ context.Context, d *Drill) error { return d.keysOnEveryGroup() },
		Script: func(ctx context.Context, d *Drill) error {
			g0 := d.Group(0)
			var masters []int
			for _, i := range inG0 {
				masters = append(masters, g0[i])
			}
			if err := d.SleepUntil(ctx, d.Cfg.Duration/4); err != nil {
				return err
			}
			what := fmt.Sprintf("%s masters %v (group g0)", kind, masters)
			if err := d.Fault(ctx, what, AllViews, masters, bind(d, apply)); err != nil {
				return err
			}
			// Half the duration from the fault, not until 3/4 of it: a
			// late start on a loaded machine must not shrink the window
			// in which the other group is watched serving its keys.
			if err := d.Sleep(ctx, d.Cfg.Duration/2); err != nil {
				return err
			}
			return d.Heal(ctx, "undo "+what, AllViews, masters, bind(d, heal))
		},
		Verify: func(d *Drill, h History) []Violation { return served(d, h, Untouched, 1) },
	}
}

// keysOnEveryGroup fails unless every group holds at least one of the
// workload's keys: a row about one group's keys needs some.
func (d *Drill) keysOnEveryGroup() error {
	held := make([]int, len(d.groups))
	for k := range d.Cfg.Keys {
		held[d.GroupOf(workloadKey(k))]++
	}
	if slices.Contains(held, 0) {
		return fmt.Errorf("chaos: the %d workload keys are spread %v over the groups: a group holds none", d.Cfg.Keys, held)
	}
	d.Notef("the %d workload keys per group: %v", d.Cfg.Keys, held)
	return nil
}

// What the group rows' Verify reports. Untouched: a call for a key on a
// group no fault touched failed, or no acquire reached that group at all.
// CallFailed: in the change of master groups, a release found its lock
// gone (the change lost a granted lock).
const (
	Untouched  = "untouched-group"
	CallFailed = "call-failed"
)

// served checks that the groups given served their keys, and reports
// what did not as invariant inv: every workload acquire of a key on them
// (retried for up to its wait) was granted or found the key held, every
// release of such a grant succeeded, and every probe whose last attempt
// took a key on them succeeded (a probe is up to three single attempts,
// as I5 judges it: one attempt may miss a per-master timeout on a loaded
// machine). A call that a stall of one of their masters overlapped (the
// PING monitor's, no fault explaining it) is the machine's, as I5 and I6
// excuse it. And each group must have granted some lock.
func served(d *Drill, h History, inv string, groups ...int) []Violation {
	var stalls []Stall
	for _, st := range h.Unexplained {
		for _, g := range groups {
			if slices.Contains(d.groups[g], st.Master) {
				stalls = append(stalls, st)
			}
		}
	}
	on := func(key string) bool { return slices.Contains(groups, d.GroupOf(key)) }
	type probe struct {
		ok, unfinished, stalled bool
		last                    *Op
	}
	probes := map[int]*probe{}
	var order []int
	var out []Violation
	grants := map[int]int{}
	for i := range h.Ops {
		op := &h.Ops[i]
		if op.Kind == "release" && !op.OK && on(op.Key) && !stalledDuring(stalls, op.Invoke, op.Return) {
			out = append(out, Violation{Invariant: inv, Key: op.Key, Ops: []int{op.ID},
				Detail: fmt.Sprintf("release of %s (group %s) through %s failed at %s: %s", op.Key, groupName(d.GroupOf(op.Key)), op.Via, fmtAt(op.Invoke), op.Err)})
		}
		if op.Kind != "acquire" {
			continue
		}
		onG := on(op.Key)
		if onG && op.OK {
			grants[d.GroupOf(op.Key)]++
		}
		if op.Probe {
			pr := probes[op.Group]
			if pr == nil {
				pr = &probe{}
				probes[op.Group] = pr
				order = append(order, op.Group)
			}
			pr.ok = pr.ok || op.OK
			pr.unfinished = pr.unfinished || op.Unfinished
			pr.stalled = pr.stalled || stalledDuring(stalls, op.Invoke, op.Return)
			pr.last = op
			continue
		}
		if !onG || op.OK || op.Outcome == "held" || stalledDuring(stalls, op.Invoke, op.Return) {
			continue
		}
		out = append(out, Violation{Invariant: inv, Key: op.Key, Ops: []int{op.ID},
			Detail: fmt.Sprintf("acquire of %s (group %s) through %s failed at %s: %s", op.Key, groupName(d.GroupOf(op.Key)), op.Via, fmtAt(op.Invoke), op.Err)})
	}
	for _, id := range order {
		pr := probes[id]
		if pr.ok || pr.unfinished || pr.stalled || !on(pr.last.Key) {
			continue
		}
		out = append(out, Violation{Invariant: inv, Key: pr.last.Key, Ops: []int{pr.last.ID},
			Detail: fmt.Sprintf("a probe ending on group %s through %s failed every attempt, the last at %s: %s", groupName(d.GroupOf(pr.last.Key)), pr.last.Via, fmtAt(pr.last.Invoke), pr.last.Err)})
	}
	for _, g := range groups {
		if grants[g] == 0 {
			out = append(out, Violation{Invariant: inv, Detail: fmt.Sprintf("no acquire of a key on group %s was granted: the row says nothing about it", groupName(g))})
		}
	}
	return out
}

// groupChange is the change of master groups from g0 alone to g0 and g1
// under load at c=64, library clients only, with the checker watching
// every grant. The change runs its three steps (redlock/moving.go):
// lib/a in phase old and lib/b in phase moving; then both moving for the
// max TTL and the longest call; then lib/a moving and lib/b new. With
// dual off (the negative control) lib/b's "moving" phase locks a moved
// key in its new group alone, beside lib/a's old phase: the transition
// without its dual acquire, which must give a moved key two holders.
//
// The daemons serve both groups throughout; they take only the probes'
// fresh keys here, never a workload key.
func groupChange(dual bool) *Scenario {
	sc := &Scenario{
		Name:    "groups-add",
		Summary: "one master group becomes two under load (64 clients, 8 keys, library): old+moving, moving for max TTL, moving+new; no two holders, fences keep rising",
		Needs:   []FaultKind{FaultGroups}, Workload: true, ScriptEnds: true,
		Clients: 64, Keys: 8, Via: "lib",
		Verify: changeServed,
	}
	old := func(d *Drill, v int) (lockRoute, error) {
		g, err := d.libGroups(v, 0)
		return plainRoute{g}, err
	}
	to := func(d *Drill, v int) (*redlock.Groups, error) { return d.libGroups(v, 0, 1) }
	moving := func(d *Drill, v int) (lockRoute, error) {
		from, err := d.libGroups(v, 0)
		if err != nil {
			return nil, err
		}
		nw, err := to(d, v)
		if err != nil {
			return nil, err
		}
		return movingRoute{redlock.NewMoving(from, nw)}, nil
	}
	newPhase := func(d *Drill, v int) (lockRoute, error) {
		g, err := to(d, v)
		return plainRoute{g}, err
	}
	set := func(d *Drill, v int, phase string, route func(*Drill, int) (lockRoute, error)) error {
		r, err := route(d, v)
		if err != nil {
			return err
		}
		d.libs[v].(*libLocker).setRoute(r)
		d.Notef("%s in phase %s", d.libs[v].Name(), phase)
		return nil
	}
	prepare := func(ctx context.Context, d *Drill) error {
		if err := d.movedKeys(); err != nil {
			return err
		}
		if !dual {
			return d.Mark(ctx, "lib/b's moving phase locks moved keys in their new group alone (no dual acquire)", func(context.Context) error {
				return errors.Join(set(d, 0, "old", old), set(d, 1, "moving without its dual acquire", newPhase))
			})
		}
		return errors.Join(set(d, 0, "old", old), set(d, 1, "moving", moving))
	}
	sc.Prepare = prepare
	if !dual {
		sc.Name = "groups-add-nodual"
		sc.Summary = "negative control: one group becomes two with lib/b locking moved keys in the new group only while lib/a is in phase old: a moved key gets two holders"
		sc.ScriptEnds = false
		sc.Must = []string{I1}
		// Two holders of one key also break the fences' order and the
		// Resource's sections.
		sc.May = []string{I2}
		sc.Verify = nil
		sc.Script = func(context.Context, *Drill) error { return nil }
		return sc
	}
	sc.Script = func(ctx context.Context, d *Drill) error {
		step := d.Cfg.Duration / 2
		if err := d.Sleep(ctx, step); err != nil {
			return err
		}
		if err := set(d, 0, "moving", moving); err != nil {
			return err
		}
		// Step 2: no locker is in phase old once every call lib/a began
		// in it has returned — within the longest acquire's bound (its
		// wait, three per-master timeouts and the slack; a call past it
		// is an I3 violation) — and every lock it took has ended a max
		// TTL later.
		wait := d.Cfg.Client.MaxTTL + d.Cfg.TTL + 3*d.Cfg.Client.PerMasterTimeout + d.Cfg.Slack
		d.Notef("step 2: waiting %v (max TTL %v and the longest call's bound) with every locker in phase moving", wait, d.Cfg.Client.MaxTTL)
		if err := d.Sleep(ctx, wait); err != nil {
			return err
		}
		if err := set(d, 1, "new", newPhase); err != nil {
			return err
		}
		return d.Sleep(ctx, step)
	}
	return sc
}

// changeServed checks the change of master groups beyond I1–I6: no
// release of a grant found its lock gone, and it notes every failed call
// by outcome. Refusals for want of a quorum are availability, not the
// change's doing: on a machine whose load stretches round trips past
// 200ms, the masters' votes are not counted (their clock readings are
// too imprecise: redlock/clock.go, maxUncertainty) with or without a
// change; the note gives their number and the first cause.
func changeServed(d *Drill, h History) []Violation {
	var out []Violation
	failed := map[string]int{}
	first := map[string]string{}
	calls := 0
	for _, op := range h.Ops {
		if op.Probe || (op.Kind != "acquire" && op.Kind != "release") {
			continue
		}
		calls++
		if op.OK || (op.Kind == "acquire" && op.Outcome == "held") {
			continue
		}
		k := op.Kind + " " + op.Outcome
		failed[k]++
		if first[k] == "" {
			first[k] = op.Err
		}
		if op.Kind == "release" && op.Outcome == "not-held" {
			out = append(out, Violation{Invariant: CallFailed, Key: op.Key, Ops: []int{op.Grant, op.ID},
				Detail: fmt.Sprintf("release of %s through %s at %s found its lock gone: %s", op.Key, op.Via, fmtAt(op.Invoke), op.Err)})
		}
	}
	if len(failed) == 0 {
		d.Notef("0 failed calls of %d workload acquires and releases (besides keys found held)", calls)
	}
	for _, k := range slices.Sorted(maps.Keys(failed)) {
		d.Notef("%d of %d workload calls failed as %q, the first: %s", failed[k], calls, k, first[k])
	}
	return out
}

// movedKeys fails unless a change from g0 alone to g0 and g1 moves at
// least one workload key, and notes which move.
func (d *Drill) movedKeys() error {
	var moved []string
	for k := range d.Cfg.Keys {
		if key := workloadKey(k); d.GroupOf(key) != 0 {
			moved = append(moved, key)
		}
	}
	if len(moved) == 0 {
		return fmt.Errorf("chaos: no workload key of %d moves to g1", d.Cfg.Keys)
	}
	d.Notef("keys moving to g1: %v (the others stay on g0)", moved)
	return nil
}

// workloadKey is the workload's key k.
func workloadKey(k int) string { return "k" + strconv.Itoa(k) }
