package config

import (
	"fmt"
	"regexp"
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
			if m == "" {
				v.add(mf, "empty")
				continue
			}
			if p := addrProblem(m, false); p != "" {
				v.add(mf, "%s", p)
				continue
			}
			id := canonicalAddr(m)
			if other, dup := addrs[id]; dup {
				v.add(mf, "%q duplicates %s: a master belongs to one group", m, other)
				continue
			}
			addrs[id] = mf
		}
	}
}
