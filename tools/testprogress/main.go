// Command testprogress reads `go test -json` on stdin and shows progress
// while the tests run: each package as it starts, each test and each
// first-level subtest (a drill row) as it ends, and for each package the
// line go test itself prints ("ok  <pkg> 12.3s", "FAIL <pkg> 12.3s").
// A failed test's output is printed in full. It exits 1 when any test,
// package or build failed, else 0.
//
//	go test -json ./... | testprogress
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time       time.Time
	Action     string
	Package    string
	ImportPath string
	Test       string
	Elapsed    float64
	Output     string
}

func main() {
	os.Exit(run(os.Stdin, os.Stdout))
}

func run(in io.Reader, out io.Writer) int {
	failed := false
	var pkgsOK, pkgsFailed int
	outputs := map[string][]string{} // by package + "\x00" + test
	testFailed := map[string]bool{}  // packages with a failed test
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// Not JSON: go test's own messages (e.g. a vet failure).
			fmt.Fprintln(out, sc.Text())
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch e.Action {
		case "build-output":
			fmt.Fprint(out, e.Output)
		case "build-fail":
			failed = true
		case "start":
			fmt.Fprintf(out, "▶ %s\n", e.Package)
		case "output":
			outputs[key] = append(outputs[key], e.Output)
		case "pass", "fail", "skip":
			if e.Test == "" {
				switch e.Action {
				case "pass":
					pkgsOK++
					fmt.Fprintf(out, "ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
				case "skip":
					fmt.Fprintf(out, "?   \t%s\t[no test files]\n", e.Package)
				case "fail":
					failed = true
					pkgsFailed++
					if !testFailed[e.Package] {
						// A build error, a panic outside tests, TestMain.
						for _, l := range outputs[key] {
							fmt.Fprint(out, l)
						}
					}
					fmt.Fprintf(out, "FAIL\t%s\t%.3fs\n", e.Package, e.Elapsed)
				}
				delete(outputs, key)
				continue
			}
			if e.Action == "fail" {
				failed = true
				testFailed[e.Package] = true
			}
			if strings.Count(e.Test, "/") <= 1 {
				fmt.Fprintf(out, "  %s %s (%.2fs)\n", strings.ToUpper(e.Action), e.Test, e.Elapsed)
			}
			if e.Action == "fail" && !strings.Contains(e.Test, "/") {
				for k, lines := range outputs {
					if k == key || strings.HasPrefix(k, key+"/") {
						for _, l := range lines {
							fmt.Fprint(out, "    "+l)
						}
					}
				}
			}
			if !strings.Contains(e.Test, "/") {
				for k := range outputs {
					if k == key || strings.HasPrefix(k, key+"/") {
						delete(outputs, k)
					}
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(out, "testprogress:", err)
		return 1
	}
	fmt.Fprintf(out, "%d package(s) ok, %d failed\n", pkgsOK, pkgsFailed)
	if failed {
		return 1
	}
	return 0
}
