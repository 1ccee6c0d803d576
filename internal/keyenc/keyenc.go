// Package keyenc is the length-prefixed encoding of the parts of the
// daemon's Redis keys: a lock key's account, namespace and key
// (daemon/keys.go, which shows why the encoding is injective), and the
// account part of the limits' keys (daemon/limits).
package keyenc

import (
	"strconv"
	"strings"
)

// WritePart writes s as "<len(s) in bytes, decimal>:<s>".
func WritePart(b *strings.Builder, s string) {
	var digits [20]byte
	b.Write(strconv.AppendInt(digits[:0], int64(len(s)), 10))
	b.WriteByte(':')
	b.WriteString(s)
}
