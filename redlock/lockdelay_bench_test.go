package redlock

import (
	"fmt"
	"testing"
)

// BenchmarkLockDelayCost measures what reading the delay records costs an
// acquire+release cycle (WithMaxLockDelay, as the daemon runs: one more
// command per vote script), next to the default, in the same run:
//
//	go test -run '^$' -bench LockDelayCost -benchtime 3s -count 3 ./redlock
//
// Target: "records" within 10% of "off" in cycles/s and script-µs/cycle.
func BenchmarkLockDelayCost(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts []Option
	}{
		{"off", nil},
		{"records", []Option{WithMaxLockDelay(MaxLockDelay)}},
	} {
		for _, conc := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/c=%d", mode.name, conc), func(b *testing.B) { benchCycles(b, conc, append(benchOpts, mode.opts...)...) })
		}
	}
}
