package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// LoadFile reads the YAML file at path over DefaultConfig: fields the file
// leaves out, or leaves empty, keep their defaults; lists in the file
// replace the default lists. Decoding is strict: an unknown field, a value
// of the wrong type, a duration without a unit or a second YAML document is
// an error giving the line. An empty file yields DefaultConfig.
//
// Every error starts with path ("redlockd.yaml: line 3: ..."); one per
// problem, joined. LoadFile does not validate; see Load and Validate.
func LoadFile(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err // an *fs.PathError, which names the file
	}
	c := DefaultConfig()
	if err := decodeStrict(data, &c); err != nil {
		return Config{}, prefixErrors(path, err)
	}
	return c, nil
}

func decodeStrict(data []byte, c *Config) error {
	// yaml.v3 truncates 1.5 into an int field, and names no field for "1"
	// (a string) there: whole-number settings are checked first, by name,
	// and the decoder's own complaint about the same line is dropped.
	var doc yaml.Node
	var pre problems
	if err := yaml.Unmarshal(data, &doc); err == nil && len(doc.Content) > 0 {
		// A value whose explicit tag it does not match ("key: !!int
		// abc") fails the decoder with the value quoted and no line or
		// field: that value may be an API key or a password, and the
		// error goes to the terminal, the log and a reload's answer.
		if tagged := mistagged(doc.Content[0], ""); len(tagged) > 0 {
			return tagged
		}
		pre = wholeNumbers(doc.Content[0], reflect.TypeOf(*c), "")
	}
	err := decodeDocument(data, c)
	if len(pre) == 0 {
		return err
	}
	var te *yaml.TypeError
	if err != nil && !errors.As(err, &te) {
		return err // a syntax error or a second document: say that
	}
	out := pre
	if te != nil {
		for _, msg := range te.Errors {
			if !pre.onLine(msg) {
				out = append(out, problem{lineOf(msg), msg})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b problem) int { return a.line - b.line })
	return out
}

func decodeDocument(data []byte, c *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // empty file, or comments only
		}
		return err
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return err
	default:
		return fmt.Errorf("line %d: a second YAML document; the file must hold one", extra.Line)
	}
}

// prefixErrors puts path in front of each problem, drops yaml's own
// "yaml: " and "unmarshal errors:" headings, which add nothing once the
// file is named, and says each problem in the file's terms (friendlyYAML).
func prefixErrors(path string, err error) error {
	var ps problems
	if errors.As(err, &ps) {
		errs := make([]error, len(ps))
		for i, p := range ps {
			errs[i] = fmt.Errorf("%s: %s", path, friendlyYAML(strings.TrimPrefix(p.msg, "yaml: ")))
		}
		return errors.Join(errs...)
	}
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("%s: %s", path, friendlyYAML(strings.TrimPrefix(err.Error(), "yaml: ")))
	}
	errs := make([]error, len(te.Errors))
	for i, msg := range te.Errors {
		errs[i] = fmt.Errorf("%s: %s", path, friendlyYAML(msg))
	}
	return errors.Join(errs...)
}

// Load builds the daemon's Config: DefaultConfig, then the file at path
// (skipped when path is ""), then the environment through lookup (skipped
// when nil; normally os.LookupEnv), then the flags set in fs (skipped when
// nil; fs must have been parsed, with flags from RegisterFlags), then the
// secrets in *_file fields ([Config.ReadSecretFiles]), and finally
// Validate. It stops at the first stage that fails and returns that
// stage's errors, all of them, joined.
func Load(path string, lookup func(string) (string, bool), fs *flag.FlagSet) (Config, error) {
	return LoadFor(path, lookup, fs)
}

// LoadFor is Load for a command that uses only some settings: it validates
// only the named YAML fields (see [Config.ValidateFields]), so that, for
// example, an admin command that never serves the API does not ask for
// api_keys. With no names it validates every field, as Load does.
func LoadFor(path string, lookup func(string) (string, bool), fs *flag.FlagSet, fields ...string) (Config, error) {
	c := DefaultConfig()
	if path != "" {
		var err error
		if c, err = LoadFile(path); err != nil {
			return Config{}, err
		}
	}
	if lookup != nil {
		if err := c.ApplyEnv(lookup); err != nil {
			return Config{}, err
		}
	}
	if fs != nil {
		if err := c.ApplyFlags(fs); err != nil {
			return Config{}, err
		}
	}
	if err := c.ReadSecretFiles(); err != nil {
		return Config{}, err
	}
	if err := c.ValidateFields(fields...); err != nil {
		return Config{}, err
	}
	return c, nil
}

// problem is one complaint about the file, with its line.
type problem struct {
	line int
	msg  string // "line N: ..."
}

// problems is a file's complaints in line order.
type problems []problem

func (ps problems) Error() string {
	msgs := make([]string, len(ps))
	for i, p := range ps {
		msgs[i] = p.msg
	}
	return strings.Join(msgs, "\n")
}

// onLine reports whether one of ps is about the line msg names.
func (ps problems) onLine(msg string) bool {
	l := lineOf(msg)
	return l > 0 && slices.ContainsFunc(ps, func(p problem) bool { return p.line == l })
}

// lineOf reads N from a yaml message "line N: ..." (0 without one).
func lineOf(msg string) int {
	var n int
	if _, err := fmt.Sscanf(msg, "line %d:", &n); err != nil {
		return 0
	}
	return n
}

// mistagged reports every scalar under n (path names n in the file's
// terms) with an explicit tag that its value does not match, by line and
// field, never with the value.
func mistagged(n *yaml.Node, path string) problems {
	var out problems
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Style&yaml.TaggedStyle != 0 {
			var v any
			if err := n.Decode(&v); err != nil {
				field := path
				if field == "" {
					field = "the document"
				}
				out = append(out, problem{n.Line, fmt.Sprintf("line %d: %s: the value is not a %s, as its tag says (the value is not shown: it may be a secret); drop the tag", n.Line, field, n.Tag)})
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			out = append(out, mistagged(n.Content[i], path)...)
			out = append(out, mistagged(n.Content[i+1], join(path, n.Content[i].Value))...)
		}
	case yaml.SequenceNode:
		for i, e := range n.Content {
			out = append(out, mistagged(e, fmt.Sprintf("%s[%d]", path, i))...)
		}
	case yaml.DocumentNode:
		for _, e := range n.Content {
			out = append(out, mistagged(e, path)...)
		}
	}
	return out
}

// wholeNumbers reports every integer setting in n (a mapping decoded into a
// value of type t; path names it in the file's terms) whose value is not a
// plain YAML integer: "extra_votes: 1.5" or "max_ttl: '600'", which the
// decoder would truncate or reject without naming the setting.
func wholeNumbers(n *yaml.Node, t reflect.Type, path string) problems {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if (reflect.PointerTo(t).Implements(yamlUnmarshaler) || t.Implements(yamlUnmarshaler)) && (t.Kind() != reflect.Struct || n.Kind != yaml.MappingNode) {
		// Decodes itself (durations, "unlimited"), with its own errors.
		// A struct given as a mapping (a quota's {calls, per}) is walked
		// as one: its integers are as truncated as any other's.
		return nil
	}
	var errs problems
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			name := n.Content[i].Value
			f, ok := fieldByYAMLName(t, name)
			if !ok {
				continue // the decoder reports unknown fields
			}
			if p := shapeProblem(n.Content[i+1], f.Type, join(path, name)); p != nil {
				errs = append(errs, *p)
				continue
			}
			errs = append(errs, wholeNumbers(n.Content[i+1], f.Type, join(path, name))...)
		}
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for i, e := range n.Content {
			item := fmt.Sprintf("%s[%d]", path, i)
			if e.Kind == yaml.ScalarNode && e.Tag == "!!null" {
				// An empty item ("- ", "null"): the decoder would drop it
				// (a group of master_groups gone without a word) or give
				// it zero values.
				errs = append(errs, problem{e.Line, fmt.Sprintf("line %d: %s: an empty item; give its value, or remove it", e.Line, item)})
				continue
			}
			if et := t.Elem(); et.Kind() == reflect.Struct && e.Kind == yaml.ScalarNode {
				// One value where an entry goes ("- acme:s3cret" in
				// api_keys): the decoder's complaint quotes the start of
				// the value, which may be a key (a black-box pass saw
				// "acme:Zq..." in the error), and came three times for a
				// master_groups entry. Never the value.
				what := "a mapping of " + strings.Join(yamlFields(et), ", ")
				if d, ok := yamlTypes[et.String()]; ok {
					what = d.what
				}
				errs = append(errs, problem{e.Line, fmt.Sprintf("line %d: %s: one value where %s goes", e.Line, item, what)})
				continue
			}
			errs = append(errs, wholeNumbers(e, t.Elem(), item)...)
		}
	case isInteger(t.Kind()) && n.Kind == yaml.ScalarNode && n.Tag != "!!int" && n.Tag != "!!null":
		errs = append(errs, problem{n.Line, fmt.Sprintf("line %d: %s: %q is not a whole number", n.Line, path, n.Value)})
	case t.Kind() == reflect.Bool && n.Kind == yaml.ScalarNode && n.Tag != "!!bool" && n.Tag != "!!null":
		// Not quoted: a value that is no boolean may be a secret written
		// on the wrong line (the decoder quoted "Zq9Secr..." for a
		// password given as master_tls).
		errs = append(errs, problem{n.Line, fmt.Sprintf("line %d: %s: must be true or false", n.Line, path)})
	}
	return errs
}

// shapeProblem names the field whose value cannot be a value of its type,
// which yaml.v3 reports without the field's name ("cannot unmarshal !!seq
// into a whole number"): a list or mapping where one value goes, one value
// where a list goes, a negative duration, and no value at all where one
// value goes ("max_ttl:", "~", "null"): an operator who wrote the line
// meant a value, and for the safety settings (max_ttl, drift_factor,
// per_master_timeout, extra_votes) silently taking the default instead
// is the wrong way to fail. An empty list or block keeps its default, as
// when the line is absent; an empty string ("") is a value, except for a
// setting that turns a protection on (protects).
func shapeProblem(v *yaml.Node, t reflect.Type, path string) *problem {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	// Duration is an integer kind too.
	single := isInteger(t.Kind()) || t.Kind() == reflect.String ||
		t.Kind() == reflect.Bool || t.Kind() == reflect.Float64 || t.Kind() == reflect.Float32
	if v.Kind == yaml.AliasNode {
		return nil
	}
	var msg string
	switch {
	case single && v.Kind == yaml.SequenceNode:
		msg = "must be one value, not a list"
	case single && v.Kind == yaml.MappingNode:
		msg = "must be one value, not a mapping"
	case single && v.Kind == yaml.ScalarNode && v.Tag == "!!null":
		msg = "has no value; give one, or remove the line to keep the default"
	case protects[path] && v.Kind == yaml.ScalarNode && v.Tag == "!!str" && v.Value == "":
		// An empty string for a setting that turns a protection on reads
		// as "none": a template that rendered nothing, or a value meant
		// to be filled in, served plain HTTP or an open admin listener
		// without a word (a black-box pass), as an empty variable or flag
		// would.
		msg = fmt.Sprintf("is empty, which leaves %s off; give a value, or remove the line if it is meant to be off", path)
	case t.Kind() == reflect.Slice && v.Kind == yaml.ScalarNode && v.Tag != "!!null":
		if strings.HasPrefix(path, "api_keys") {
			// Never the value: it is a key (a black-box pass saw one in
			// full in the error, the reload's answer and its log line).
			msg = "must be a list of {name, key} entries, not one value"
		} else {
			msg = fmt.Sprintf("must be a list (e.g. [%s]), not one value", v.Value)
		}
	case t == durationType && v.Kind == yaml.ScalarNode && strings.HasPrefix(strings.TrimSpace(v.Value), "-"):
		msg = fmt.Sprintf("%q: must not be negative", v.Value)
	default:
		return nil
	}
	return &problem{v.Line, fmt.Sprintf("line %d: %s: %s", v.Line, path, msg)}
}

var durationType = reflect.TypeFor[Duration]()

var yamlUnmarshaler = reflect.TypeFor[yaml.Unmarshaler]()

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func isInteger(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// fieldByYAMLName finds t's field whose yaml tag is name.
func fieldByYAMLName(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if isInline(f, tag, opts) {
			// An inline struct's fields are the mapping's own (an
			// api_keys entry's limits): without this, "max_locks: 12.9"
			// there was truncated to 12 without a word, while the same
			// line in account_defaults was refused (a black-box pass).
			if g, ok := fieldByYAMLName(f.Type, name); ok {
				return g, true
			}
			continue
		}
		if tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}
