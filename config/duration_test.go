package config_test

import (
	"encoding/json"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/redlockd/redlockd/config"
)

func TestDurationYAML(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{"50ms", 50 * time.Millisecond, ""},
		{"1s", time.Second, ""},
		{"2m30s", 150 * time.Second, ""},
		{`"1.5s"`, 1500 * time.Millisecond, ""},
		{"0", 0, ""},
		{"0s", 0, ""},
		{"50", 0, `line 1: "50": no unit; write it with one, e.g. "50ms" or "50s"`},
		{"1.5", 0, `line 1: "1.5": no unit; write it with one, e.g. "1.5ms" or "1.5s"`},
		{"-1s", 0, `line 1: "-1s": negative durations are not allowed`},
		{"-5", 0, `line 1: "-5": no unit; write it with one, e.g. "-5ms" or "-5s"`},
		{"soon", 0, `line 1: "soon": not a duration; write e.g. "50ms", "1s" or "2m30s"`},
		{"[1s]", 0, `line 1: want a duration such as "50ms" or "1s"`},
	}
	for _, tt := range tests {
		var d config.Duration
		err := yaml.Unmarshal([]byte(tt.in), &d)
		if tt.wantErr != "" {
			te, ok := err.(*yaml.TypeError)
			if !ok || len(te.Errors) != 1 || te.Errors[0] != tt.wantErr {
				t.Errorf("Unmarshal(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || time.Duration(d) != tt.want {
			t.Errorf("Unmarshal(%q) = %v, %v; want %v", tt.in, d, err, tt.want)
		}
	}
}

func TestDurationRoundTrip(t *testing.T) {
	in := struct {
		D config.Duration `yaml:"d" json:"d"`
	}{config.Duration(1500 * time.Millisecond)}
	out := in
	out.D = 0

	b, err := yaml.Marshal(in)
	if err != nil || string(b) != "d: 1.5s\n" {
		t.Fatalf("yaml.Marshal = %q, %v", b, err)
	}
	if err := yaml.Unmarshal(b, &out); err != nil || out != in {
		t.Errorf("yaml round trip = %v, %v", out, err)
	}

	out.D = 0
	b, err = json.Marshal(in)
	if err != nil || string(b) != `{"d":"1.5s"}` {
		t.Fatalf("json.Marshal = %s, %v", b, err)
	}
	if err := json.Unmarshal(b, &out); err != nil || out != in {
		t.Errorf("json round trip = %v, %v", out, err)
	}
	if err := json.Unmarshal([]byte(`{"d":"50"}`), &out); err == nil {
		t.Error("json accepted a duration without a unit")
	}
}
