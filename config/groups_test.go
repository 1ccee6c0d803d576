package config_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redlockd/redlockd/config"
)

const groupsKeys = `api_keys: [{name: shop, key: "0123456789abcdef0123456789abcdef"}]
`

func TestMasterGroupsLoad(t *testing.T) {
	path := writeFile(t, groupsKeys+`master_groups:
  - name: g0
    masters: ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]
  - name: east-2
    masters: ["127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103", "127.0.0.1:7104", "127.0.0.1:7105"]
extra_votes: 1
`)
	cfg, err := config.Load(path, nil, nil)
	require.NoError(t, err)
	groups := cfg.Groups()
	require.Len(t, groups, 2)
	require.Equal(t, "g0", groups[0].Name)
	require.Equal(t, "east-2", groups[1].Name)
	require.Len(t, groups[1].Masters, 5)
}

// TestMastersIsTheDefaultGroup: today's masters list is one group, named
// "default", and nothing about it changes.
func TestMastersIsTheDefaultGroup(t *testing.T) {
	path := writeFile(t, groupsKeys+`masters: ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]
`)
	cfg, err := config.Load(path, nil, nil)
	require.NoError(t, err)
	require.Empty(t, cfg.MasterGroups)
	require.Equal(t, []config.MasterGroup{{Name: config.DefaultGroupName, Masters: cfg.Masters}}, cfg.Groups())
}

func TestMasterGroupsErrors(t *testing.T) {
	three := `["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]`
	for name, tc := range map[string]struct{ yaml, want string }{
		"both": {`masters: ` + three + `
master_groups: [{name: g0, masters: ["127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"]}]`,
			`masters: set together with master_groups`},
		"even": {`master_groups: [{name: g0, masters: ` + three + `}, {name: g1, masters: ["127.0.0.1:7101", "127.0.0.1:7102"]}]`,
			`master_groups[1].masters: 2 given, need an odd number ≥ 3`},
		"shared master": {`master_groups: [{name: g0, masters: ` + three + `}, {name: g1, masters: ["127.0.0.1:7101", "127.0.0.1:7002", "127.0.0.1:7103"]}]`,
			`master_groups[1].masters[1]: "127.0.0.1:7002" duplicates master_groups[0].masters[1]: a master belongs to one group`},
		"a master twice in one group": {`master_groups: [{name: g0, masters: ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7001"]}]`,
			`master_groups[0].masters[2]: "127.0.0.1:7001" duplicates master_groups[0].masters[0]: list each master once`},
		"duplicate name": {`master_groups: [{name: g0, masters: ` + three + `}, {name: g0, masters: ["127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"]}]`,
			`master_groups[1].name: "g0" duplicates master_groups[0].name`},
		"bad name": {`master_groups: [{name: "G 0", masters: ` + three + `}]`,
			`master_groups[0].name: "G 0": need 1-32 characters from a-z 0-9 -`},
		"extra votes over the smallest group": {`master_groups: [{name: g0, masters: ` + three + `}, {name: g1, masters: ["127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103", "127.0.0.1:7104", "127.0.0.1:7105"]}]
extra_votes: 2`,
			`extra_votes: 2 is out of range, need 0 to 1 with 3 masters in the smallest group`},
		"unknown field": {`master_groups: [{name: g0, masters: ` + three + `, quorum: 2}]`, `quorum`},
		// A helper's pass: the null item was dropped and the daemon served
		// one group.
		"an empty item": {`master_groups: [null, {name: g0, masters: ` + three + `}]`, `master_groups[0]: an empty item; give its value, or remove it`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := config.Load(writeFile(t, groupsKeys+tc.yaml+"\n"), nil, nil)
			require.Error(t, err)
			require.True(t, strings.Contains(err.Error(), tc.want), "error %q\nwant it to contain %q", err, tc.want)
		})
	}
}

func TestPreviousMasterGroups(t *testing.T) {
	a := `["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]`
	b := `["127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"]`
	path := writeFile(t, groupsKeys+`master_groups: [{name: default, masters: `+a+`}, {name: g1, masters: `+b+`}]
previous_master_groups: [{name: default, masters: `+a+`}]
`)
	cfg, err := config.Load(path, nil, nil)
	require.NoError(t, err)
	require.Len(t, cfg.PreviousMasterGroups, 1)

	for name, tc := range map[string]struct{ yaml, want string }{
		"a group that stays changes its masters": {`master_groups: [{name: default, masters: ` + a + `}, {name: g1, masters: ` + b + `}]
previous_master_groups: [{name: g1, masters: ["127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7199"]}]`,
			`previous_master_groups[0].masters: group "g1" has other masters than in the current groups`},
		"a retired group shares a master": {`master_groups: [{name: g1, masters: ` + b + `}]
previous_master_groups: [{name: old, masters: ["127.0.0.1:7101", "127.0.0.1:7202", "127.0.0.1:7203"]}]`,
			`previous_master_groups[0].masters[0]: "127.0.0.1:7101" is a master of the current group "g1"`},
		// Idempotency records and quotas live on the first group: a change
		// that puts another first would lose them (a helper's pass: a
		// payment ran twice after master_groups was reordered).
		"the first group changes": {`master_groups: [{name: g1, masters: ` + b + `}, {name: default, masters: ` + a + `}]
previous_master_groups: [{name: default, masters: ` + a + `}]`,
			`master_groups[0].name: "g1" is not the first of previous_master_groups ("default"): idempotency records and the accounts' quotas and rates live on the first group`},
		"a duplicate previous name names the previous list": {`master_groups: [{name: default, masters: ` + a + `}]
previous_master_groups: [{name: default, masters: ` + a + `}, {name: default, masters: ` + b + `}]`,
			`previous_master_groups[1].name: "default" duplicates previous_master_groups[0].name`},
		// A black-box pass: taken, such a daemon ran as moving, which the
		// layout gate does not hold, and granted keys beside the daemons
		// of a later layout.
		"the same groups on both sides": {`master_groups: [{name: default, masters: ` + a + `}, {name: g1, masters: ` + b + `}]
previous_master_groups: [{name: default, masters: ` + a + `}, {name: g1, masters: ` + b + `}]`,
			`previous_master_groups: the same groups as master_groups, in the same order`},
		"one group, masters on both sides": {`masters: ` + a + `
previous_master_groups: [{name: default, masters: ` + a + `}]`,
			`previous_master_groups: the same groups as master_groups`},
		"an even previous group": {`masters: ` + a + `
previous_master_groups: [{name: old, masters: ["127.0.0.1:7201", "127.0.0.1:7202"]}]`,
			`previous_master_groups[0].masters: 2 given, need an odd number ≥ 3`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := config.Load(writeFile(t, groupsKeys+tc.yaml+"\n"), nil, nil)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestComposeGroupsFile: docker/groups.compose.yml's daemon config loads:
// two groups of five.
func TestComposeGroupsFile(t *testing.T) {
	cfg, err := config.LoadFile("../docker/redlockd.groups.compose.yaml")
	require.NoError(t, err)
	require.NoError(t, cfg.Validate())
	groups := cfg.Groups()
	require.Len(t, groups, 2)
	require.Len(t, groups[0].Masters, 5)
	require.Len(t, groups[1].Masters, 5)
}
