package daemon

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/redlockd/redlockd/redlock"
)

// TestNotHeldMsgOfAChangeExtend: an extend refused because the lock was
// taken before the change of master groups says so, instead of "it expired
// or was already released" for a lock status still shows held.
func TestNotHeldMsgOfAChangeExtend(t *testing.T) {
	err := fmt.Errorf("group b: %w", &redlock.ChangeExtendError{Group: "b", Err: redlock.ErrNotHeld})
	assert.Contains(t, notHeldMsg(err), "taken before the change of master groups")
	assert.Equal(t, msgNotHeld, notHeldMsg(redlock.ErrNotHeld))
	prev := fmt.Errorf("group a: %w", &redlock.ChangeExtendError{Group: "a", Err: redlock.ErrNotHeld, Previous: true})
	assert.Contains(t, notHeldMsg(prev), "taken through a daemon on the new master groups cannot be extended through a daemon in the moving phase")
}

// TestInvalidArgumentOfAGroup: a listing's bad cursor through master
// groups is answered with redlock's argument message alone, not
// "group g0: redlock: invalid argument: cursor: …".
func TestInvalidArgumentOfAGroup(t *testing.T) {
	err := fmt.Errorf("group g0: %w", fmt.Errorf("%w: cursor: not a cursor of this listing", redlock.ErrInvalid))
	assert.Equal(t, "cursor: not a cursor of this listing", invalidArgument(err))
	assert.Equal(t, "cursor: x", invalidArgument(fmt.Errorf("%w: cursor: x", redlock.ErrInvalid)))
}
