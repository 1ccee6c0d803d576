package config

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
)

// yaml.v3 names Go types in its messages ("field masterz not found in type
// config.Config", "cannot unmarshal !!str `soon` into int"). friendlyYAML
// rewrites them in the file's own terms:
//
//	line 2: unknown field "masterz"; did you mean "masters"?
//	line 1: cannot unmarshal !!str `soon` into a whole number
var (
	reUnknownField = regexp.MustCompile(`^(line \d+: )field (.+) not found in type ([\w.]+)$`)
	reInto         = regexp.MustCompile(` into ([\w.\[\]]+)$`)
)

// yamlTypes are the Go types of the file, by the name yaml.v3 gives them,
// with what a message calls them and the YAML names of their fields.
var yamlTypes = map[string]struct {
	what   string
	fields []string
}{
	"config.Config":        {"the settings (a mapping of field: value)", yamlFields(reflect.TypeFor[Config]())},
	"config.APIKey":        {"an api_keys entry (a mapping with name and key or key_sha256)", yamlFields(reflect.TypeFor[APIKey]())},
	"[]config.APIKey":      {"a list of api_keys entries", nil},
	"config.MasterGroup":   {"a master_groups entry (a mapping with name and masters)", yamlFields(reflect.TypeFor[MasterGroup]())},
	"[]config.MasterGroup": {"a list of master_groups entries", nil},
	"[]string":             {"a list", nil},
	"int":                  {"a whole number", nil},
	"int64":                {"a whole number", nil},
	"float64":              {"a number", nil},
	"string":               {"a string", nil},
}

func yamlFields(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case isInline(f, name, opts):
			names = append(names, yamlFields(f.Type)...) // an api_keys entry's limits
		case name != "" && name != "-":
			names = append(names, name)
		}
	}
	return names
}

// friendlyYAML rewrites one message of a yaml.v3 error; see yamlTypes.
func friendlyYAML(msg string) string {
	if m := reUnknownField.FindStringSubmatch(msg); m != nil {
		out := m[1] + `unknown field "` + m[2] + `"`
		if near := nearest(m[2], yamlTypes[m[3]].fields); near != "" {
			out += `; did you mean "` + near + `"?`
		}
		return out
	}
	if m := reInto.FindStringSubmatchIndex(msg); m != nil {
		if t, ok := yamlTypes[msg[m[2]:m[3]]]; ok {
			return msg[:m[2]] + t.what
		}
	}
	return msg
}

// nearest returns the name in names closest to s by edit distance, if it is
// close: at most 2 edits, and fewer than half of s's length.
func nearest(s string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := editDistance(strings.ToLower(s), n); d < bestD && 2*d < len(s) {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, by bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// isInline reports whether f, whose yaml tag is name,opts, is a struct
// inlined in its parent's mapping (`yaml:",inline"`: an api_keys entry's
// limits), so that its fields are the parent's own.
func isInline(f reflect.StructField, name, opts string) bool {
	return name == "" && f.Anonymous && f.Type.Kind() == reflect.Struct && slices.Contains(strings.Split(opts, ","), "inline")
}
