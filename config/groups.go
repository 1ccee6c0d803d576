package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// DefaultGroupName is the name of the one master group that Masters
// configures.
const DefaultGroupName = "default"

// MasterGroup is one group of independent Redis masters (YAML
// master_groups[i]): Name, 1-32 characters from a-z 0-9 - (not starting or
// ending with -), unique; Masters, host:port, an odd number, at least 3,
// none in another group.
type MasterGroup struct {
	Name    string   `yaml:"name"`
	Masters []string `yaml:"masters"`
}

var groupNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)

// Groups is the configured master groups in order: MasterGroups, or the
// one group DefaultGroupName of Masters.
func (c Config) Groups() []MasterGroup {
	if len(c.MasterGroups) > 0 {
		return c.MasterGroups
	}
	return []MasterGroup{{Name: DefaultGroupName, Masters: c.Masters}}
}

// smallestGroup is the master count of the smallest group (the one that
// bounds extra_votes).
func (c Config) smallestGroup() int {
	n := -1
	for _, g := range c.Groups() {
		if n < 0 || len(g.Masters) < n {
			n = len(g.Masters)
		}
	}
	return n
}

// validatePreviousGroups checks previous_master_groups: groups as
// master_groups takes them, the same masters for a name in both lists,
// and no master of a previous-only group in a current one.
func (c *Config) validatePreviousGroups(v *validator) {
	if len(c.PreviousMasterGroups) == 0 {
		return
	}
	prev := Config{MasterGroups: c.PreviousMasterGroups}
	var pv validator
	prev.validateMasterGroups(&pv)
	for _, e := range pv.errs {
		fe := e.(*FieldError)
		// The problems name other items of the same list: previous_ too.
		problem := strings.ReplaceAll(fe.Problem, "master_groups[", "previous_master_groups[")
		v.errs = append(v.errs, &FieldError{Field: "previous_" + fe.Field, Problem: problem})
	}
	// Idempotency records and the accounts' quotas and rates live on the
	// first group's masters: a change of groups that put another group
	// first would lose them (every record gone: a retried request runs
	// again), and nothing moves them.
	if gs := c.Groups(); len(gs) > 0 && gs[0].Name != c.PreviousMasterGroups[0].Name {
		now, was := gs[0].Name, c.PreviousMasterGroups[0].Name
		v.add("master_groups[0].name", "%q is not the first of previous_master_groups (%q): idempotency records and the accounts' quotas and rates live on the first group, so the first group stays first through a change of groups", now, was)
	}
	// The same groups, in the same order, on both sides: a change that
	// changes nothing. Taken, such a daemon ran as moving, which the layout
	// gate does not hold (it locks on both layouts), and it granted keys
	// beside the daemons of a later layout (a black-box pass: 41 overlapping
	// grants, a fence handed out twice).
	if slices.EqualFunc(c.Groups(), c.PreviousMasterGroups, func(a, b MasterGroup) bool {
		return a.Name == b.Name && slices.Equal(a.Masters, b.Masters)
	}) {
		v.add("previous_master_groups", "the same groups as master_groups, in the same order: a change of groups changes them; without one, leave previous_master_groups out")
	}
	cur := map[string]MasterGroup{}
	addrs := map[string]string{}
	for _, g := range c.Groups() {
		cur[g.Name] = g
		for _, m := range g.Masters {
			addrs[canonicalAddr(m)] = g.Name
		}
	}
	for i, g := range c.PreviousMasterGroups {
		field := fmt.Sprintf("previous_master_groups[%d]", i)
		if now, ok := cur[g.Name]; ok {
			if !slices.Equal(now.Masters, g.Masters) {
				v.add(field+".masters", "group %q has other masters than in the current groups: a group that stays keeps its masters, in the same order", g.Name)
			}
			continue
		}
		for j, m := range g.Masters {
			if other, ok := addrs[canonicalAddr(m)]; ok {
				v.add(fmt.Sprintf("%s.masters[%d]", field, j), "%q is a master of the current group %q: a master belongs to one group", m, other)
			}
		}
	}
}

// ValidGroupName reports whether name is a valid master group name
// (master_groups[].name): 1-32 characters from a-z 0-9 -, not starting or
// ending with -.
func ValidGroupName(name string) bool { return groupNameRE.MatchString(name) }

func (c *Config) validateMasterGroups(v *validator) {
	if len(c.Masters) > 0 {
		v.add("masters", "set together with master_groups: set one of them (masters is the one group %q)", DefaultGroupName)
	}
	names := map[string]int{}
	addrs := map[string]string{}
	for gi, g := range c.MasterGroups {
		field := fmt.Sprintf("master_groups[%d]", gi)
		switch j, dup := names[g.Name]; {
		case !groupNameRE.MatchString(g.Name):
			v.add(field+".name", "%q: need 1-32 characters from a-z 0-9 - (not starting or ending with -)", g.Name)
		case dup:
			v.add(field+".name", "%q duplicates master_groups[%d].name", g.Name, j)
		default:
			names[g.Name] = gi
		}
		if n := len(g.Masters); n < minMasters || n%2 == 0 {
			v.add(field+".masters", "%d given, need an odd number ≥ %d", n, minMasters)
		}
		for i, m := range g.Masters {
			mf := fmt.Sprintf("%s.masters[%d]", field, i)
			id, ok := v.masterAddr(mf, m)
			if !ok {
				continue
			}
			if other, dup := addrs[id]; dup {
				why := "a master belongs to one group"
				if strings.HasPrefix(other, field+".") {
					why = "list each master once" // twice in one group
				}
				v.add(mf, "%q duplicates %s: %s", m, other, why)
				continue
			}
			addrs[id] = mf
		}
	}
}
