package redlock

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strings"
)

// Placement assigns every key to one of a fixed set of named master
// groups by rendezvous (highest random weight) hashing, Thaler and
// Ravishankar, "Using Name-Based Mappings to Increase Hit Rates" (IEEE/ACM
// ToN 1998):
//
//	weight(group, key) = the first 8 bytes, read as a big-endian uint64,
//	                     of SHA-256(group name ‖ 0x00 ‖ key)
//	group(key)         = the group of the highest weight; on equal weights,
//	                     the group whose name is smaller bytewise
//
// The key is the exact byte string given (the daemon gives the Redis key:
// its key prefix and the injective encoding of account, namespace and
// key), so any language with SHA-256 places keys as every daemon replica
// and every library user does, whatever the order the groups are listed in.
// Adding a group moves only the keys it wins (about 1/(n+1) of them) and
// removing one moves only its own keys; a key never moves between two
// groups that both stay. A Placement is immutable and safe for concurrent
// use.
type Placement struct {
	names []string
}

// MaxGroups is the largest number of groups a Placement takes.
const MaxGroups = 256

// NewPlacement returns the Placement over the named groups. Names must be
// non-empty and unique; 1 to MaxGroups of them. Errors match ErrInvalid.
func NewPlacement(names ...string) (*Placement, error) {
	if len(names) == 0 || len(names) > MaxGroups {
		return nil, fmt.Errorf("%w: %d groups, need 1 to %d", ErrInvalid, len(names), MaxGroups)
	}
	seen := make(map[string]int, len(names))
	for i, n := range names {
		if n == "" {
			return nil, fmt.Errorf("%w: group %d has an empty name", ErrInvalid, i)
		}
		if j, dup := seen[n]; dup {
			return nil, fmt.Errorf("%w: group %d's name %q is group %d's", ErrInvalid, i, n, j)
		}
		seen[n] = i
	}
	return &Placement{names: append([]string(nil), names...)}, nil
}

// Names is the groups' names in the order given to NewPlacement.
func (p *Placement) Names() []string { return append([]string(nil), p.names...) }

// Group is the index (in Names) of the group key is placed on. A
// semaphore's slot lock ("<name>#permit:<slot>", PermitKey) is placed by
// the semaphore's name, so that every slot of one semaphore lives in one
// group: the permit an acquire takes there is released and extended
// there, and one group's slots bound the holders.
func (p *Placement) Group(key string) int {
	if q, ok := permitQueue(key); ok {
		key = strings.TrimSuffix(q, permitSep)
	}
	best, bestW := 0, PlacementWeight(p.names[0], key)
	for i := 1; i < len(p.names); i++ {
		w := PlacementWeight(p.names[i], key)
		if w > bestW || (w == bestW && p.names[i] < p.names[best]) {
			best, bestW = i, w
		}
	}
	return best
}

// PlacementWeight is the rendezvous weight of key on the named group: the
// first 8 bytes of SHA-256(group ‖ 0x00 ‖ key) as a big-endian uint64.
func PlacementWeight(group, key string) uint64 {
	h := sha256.New()
	h.Write([]byte(group))
	h.Write([]byte{0})
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0])[:8])
}
