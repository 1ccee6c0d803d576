package redlock

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A master that failed twice in one acquire (its vote, then its fence
// write-back) counts once in the message, and both errors are listed: "7
// master(s) failed" of 5 (a black-box pass).
func TestOutcomeErrorCountsEachMasterOnce(t *testing.T) {
	e := &OutcomeError{Op: "acquire", Kind: ErrQuorumUnavailable, Quorum: 3, Masters: 5, Votes: 3, Failures: []error{
		&MasterError{Index: 1, Addr: "a:1", Err: ErrMasterTimeout},
		&MasterError{Index: 1, Addr: "a:1", Err: errors.New("fence write-back: redis: client is closed")},
		&MasterError{Index: 4, Addr: "a:4", Err: ErrMasterDown},
	}}
	assert.Contains(t, e.Error(), "got 3 of 5 votes (quorum 3), 2 master(s) failed: ")
	assert.Contains(t, e.Error(), "fence write-back: redis: client is closed")
}
