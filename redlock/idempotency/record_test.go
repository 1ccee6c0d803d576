package idempotency

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// parseCopyReference is parseCopy as it was before flatStrings: every
// element decoded by encoding/json, the answer with it. parseCopy must
// give the same answer for every input.
func parseCopyReference(extra string, pttl int64) (Record, bool) {
	var flat []string
	if err := json.Unmarshal([]byte(extra), &flat); err != nil || len(flat)%2 != 0 {
		return Record{}, false
	}
	var r Record
	sized, status := false, 0
	for i := 0; i < len(flat); i += 2 {
		v := flat[i+1]
		switch flat[i] {
		case "fp":
			r.Fingerprint = v
		case "st":
			switch v {
			case "IN_PROGRESS":
				r.State = StateInProgress
			case "COMPLETED":
				r.State = StateCompleted
			}
		case "tok":
			r.token = v
		case "fence":
			r.Fence, _ = strconv.ParseInt(v, 10, 64)
		case "att":
			r.Attempts, _ = strconv.ParseInt(v, 10, 64)
		case "t0":
			ms, _ := strconv.ParseInt(v, 10, 64)
			r.StartedAt = time.UnixMilli(ms)
		case "tc":
			ms, _ := strconv.ParseInt(v, 10, 64)
			r.CompletedAt = time.UnixMilli(ms)
		case "ret":
			ms, _ := strconv.ParseInt(v, 10, 64)
			r.retention = time.Duration(ms) * time.Millisecond
		case "ans":
			var a Answer
			if json.Unmarshal([]byte(v), &a) == nil {
				r.Answer = &a
			}
		case "asz":
			r.answerSize, _ = strconv.Atoi(v)
			sized = true
		case "ast":
			status, _ = strconv.Atoi(v)
		}
	}
	switch {
	case r.Answer == nil && sized && r.State == StateCompleted:
		r.Answer = &Answer{Status: status}
	case r.Answer != nil && !sized:
		r.answerSize = r.Answer.Size()
	}
	if pttl > 0 {
		r.TTL = time.Duration(pttl) * time.Millisecond
	}
	if r.State == StateAbsent || (r.State == StateCompleted && r.Answer == nil) {
		return Record{}, false
	}
	return r, true
}

// copyText encodes fields as read.lua's cjson does (no whitespace, '/'
// escaped).
func copyText(t testing.TB, fields ...string) string {
	b, err := json.Marshal(fields)
	require.NoError(t, err)
	return strings.ReplaceAll(string(b), "/", `\/`)
}

// parseCopySeeds: copies as the scripts write them, and the shapes a copy
// this package did not write may have.
func parseCopySeeds(t testing.TB) []string {
	ans, err := json.Marshal(&Answer{Status: 201, Headers: map[string]string{"Content-Type": "application/json", "Location": "/o/1"}, Body: []byte("{\"order\":\"é/\\u0000\"}\n\x00\xff")})
	require.NoError(t, err)
	tok := strings.Repeat("a", 32)
	full := copyText(t, "fp", strings.Repeat("f", 64), "st", "COMPLETED", "tok", tok, "fence", "42", "att", "3",
		"t0", "1733400000000", "ret", "3600000", "ans", string(ans), "tc", "1733400001000", "asz", "57", "ast", "201")
	return []string{
		full,
		copyText(t, "fp", "x", "st", "IN_PROGRESS", "tok", tok, "fence", "7", "att", "1", "t0", "5", "ret", "60000"),
		copyText(t, "st", "COMPLETED", "fence", "9", "asz", "10", "ast", "200"),              // a listing's read
		copyText(t, "st", "COMPLETED", "fence", "9", "ans", "{not json"),                     // an answer that does not decode
		copyText(t, "st", "COMPLETED", "fence", "9"),                                         // completed, no answer
		copyText(t, "st", "NEW", "fence", "9"),                                               // no state this package writes
		copyText(t, "st", "IN_PROGRESS", "fence", "x\"y\\z\t\u2028é"),                        // escapes
		copyText(t, "st", "IN_PROGRESS", "odd"),                                              // odd length
		copyText(t),                                                                          // []
		`[ "st" , "IN_PROGRESS" ]`,                                                           // whitespace: encoding/json decides
		"[\"st\",\"IN_PROGRESS\",\"fp\",\"a\x01b\"]",                                         // a control character unescaped
		"[\"st\",\"IN_PROGRESS\",\"fp\",\"a\xffb\"]",                                         // invalid UTF-8 unescaped
		"[\"st\",\"IN_PROGRESS\",\"fp\",\"a\\u00e9\\ud800b\"]",                               // a lone surrogate, escaped
		`["st","COMPLETED","ans","{\"status\":200}` + "\x01" + `"]`,                          // a control character in the answer
		`["st","COMPLETED","ans","{\"status\":200}\q"]`,                                      // a bad escape in the answer
		`["st","IN_PROGRESS","fence",7]`,                                                     // a number
		`["st","IN_PROGRESS",`, `["st","IN_PROGRESS"]x`, `["st","IN_PROGRESS\"]`, `"st"`, ``, // cut or trailing
		`["st","IN_PROGRESS","fp","\\"]`, `["st","IN_PROGRESS","fp","\\\"]`, // backslashes before a quote
		strings.Replace(full, `"fence","42"`, `"fence","43","fence","41"`, 1), // a field twice
		// 'ans' twice: the last that decodes answers; a bad literal in
		// either makes the copy invalid (review of the first version).
		`["st","COMPLETED","ans","{\"status\":200}","ans","x"]`,
		`[ "st","COMPLETED","ans","{\"status\":200}","ans","x"]`,
		`["st","IN_PROGRESS","ans","{}","ans","x"]`,
		`["st","COMPLETED","ans","{\"status\":201}","ans","{\"status\":202}"]`,
		`["st","IN_PROGRESS","ans","\q","ans","{}"]`,
		"[\"st\",\"IN_PROGRESS\",\"ans\",\"\x01\",\"ans\",\"{}\"]",
		`["ans","st","st","IN_PROGRESS"]`, // 'ans' as a value
	}
}

// TestParseCopyAsEncodingJSON: flatStrings and unquote give the record
// encoding/json gave, for copies as written and for malformed ones.
func TestParseCopyAsEncodingJSON(t *testing.T) {
	for _, in := range parseCopySeeds(t) {
		want, wantOK := parseCopyReference(in, 1500)
		got, gotOK := parseCopy(in, 1500)
		assert.Equal(t, wantOK, gotOK, "%q", in)
		assert.Equal(t, want, got, "%q", in)
	}
	_, fast := flatStrings(parseCopySeeds(t)[0], nil)
	assert.True(t, fast, "a copy as read.lua encodes it takes the fast path")
}

func FuzzParseCopy(f *testing.F) {
	for _, in := range parseCopySeeds(f) {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		want, wantOK := parseCopyReference(in, 7)
		got, gotOK := parseCopy(in, 7)
		if wantOK != gotOK {
			t.Fatalf("%q: ok %v, encoding/json %v", in, gotOK, wantOK)
		}
		assert.Equal(t, want, got, "%q", in)
	})
}

// TestAddCopyChoosesAsAdd: addCopy, which decodes an answer only for a
// copy it chooses, ends with the copies add chose from parseCopy's
// records, in any order of arrival.
func TestAddCopyChoosesAsAdd(t *testing.T) {
	mk := func(fence int, body string) string {
		ans, err := json.Marshal(&Answer{Status: 200, Body: []byte(body)})
		require.NoError(t, err)
		return copyText(t, "st", "COMPLETED", "fence", strconv.Itoa(fence), "ans", string(ans), "tok", body)
	}
	bad := copyText(t, "st", "COMPLETED", "fence", "9", "ans", "{not json", "tok", "bad")
	inProgress := copyText(t, "st", "IN_PROGRESS", "fence", "10", "tok", "ip")
	orders := [][]string{
		{mk(8, "B"), mk(8, "C"), mk(7, "A"), bad, inProgress},
		{bad, mk(7, "A"), mk(8, "C"), inProgress, mk(8, "B")},
		{inProgress, bad, mk(8, "B"), mk(8, "C"), mk(7, "A")},
	}
	for _, order := range orders {
		var fast, ref copies
		for i, in := range order {
			fast.addCopy(in, int64(i+1))
			if r, ok := parseCopy(in, int64(i+1)); ok {
				ref.add(r)
			}
		}
		require.NotNil(t, fast.completed)
		assert.Equal(t, *ref.completed, *fast.completed, "%q", order)
		assert.Equal(t, *ref.inProgress, *fast.inProgress, "%q", order)
		assert.EqualValues(t, 8, fast.completed.Fence, "the highest fence whose answer decodes")
	}
}

// BenchmarkParseCopy: one copy of a completed record with a 1 KiB answer.
func BenchmarkParseCopy(b *testing.B) {
	ans, err := json.Marshal(&Answer{Status: 200, Body: make([]byte, 1024)})
	require.NoError(b, err)
	in := copyText(b, "fp", strings.Repeat("f", 64), "st", "COMPLETED", "tok", strings.Repeat("a", 32), "fence", "42",
		"att", "1", "t0", "1733400000000", "ret", "3600000", "ans", string(ans), "tc", "1733400001000", "asz", "1024", "ast", "200")
	b.Run("fields", func(b *testing.B) {
		for b.Loop() {
			parseCopyFields(in, 1)
		}
	})
	b.Run("whole", func(b *testing.B) {
		for b.Loop() {
			parseCopy(in, 1)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			parseCopyReference(in, 1)
		}
	})
}

// FuzzAddCopy: three copies added in turn by addCopy end with the copies
// parseCopy and add chose.
func FuzzAddCopy(f *testing.F) {
	seeds := parseCopySeeds(f)
	for i := range seeds {
		f.Add(seeds[i], seeds[(i+1)%len(seeds)], seeds[(i+5)%len(seeds)])
	}
	f.Fuzz(func(t *testing.T, a, b, c string) {
		var fast, ref copies
		for i, in := range []string{a, b, c} {
			fast.addCopy(in, int64(i+1))
			if r, ok := parseCopy(in, int64(i+1)); ok {
				ref.add(r)
			}
		}
		assert.Equal(t, ref.completed, fast.completed)
		assert.Equal(t, ref.inProgress, fast.inProgress)
	})
}
