package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/internal/guardswitch"
	"github.com/redlockd/redlockd/redlock"
)

// copyScript copies every key of database 0 into database 1 (emptied
// first), with its TTL, in one script: an atomic copy of the master's data,
// like the dump or the replica an operator would later restore from.
var copyScript = redis.NewScript(`
redis.call('SELECT', 1)
redis.call('FLUSHDB')
redis.call('SELECT', 0)
local ks = redis.call('KEYS', '*')
for _, k in ipairs(ks) do redis.call('COPY', k, k, 'DB', 1, 'REPLACE') end
return #ks`)

// dropCopyScript empties database 1 (after the swap: the newer data the
// rollback replaced), so that nothing of it lingers on a shared master.
var dropCopyScript = redis.NewScript(`
redis.call('SELECT', 1)
redis.call('FLUSHDB')
return 1`)

// rollbackVictim is the master rolled back: one of the three that hold A.
const rollbackVictim = 2

// rollback: A holds the key on masters 0–2 only; master 2's data is
// copied, A extends its lock, and master 2 goes back to the copy (SWAPDB
// with the copied database: no restart, no DEBUG, no file, so the same on
// both targets). Master 2 has lost A's extend while every check of its own
// state still reads as before: its marker and run_id are unchanged, its
// fencing counter is the same (the copy was taken after A's fence
// write-back), and its lease horizon did not drop (a longer lock on
// another key, taken before the copy, holds it above A's extended expiry).
// Once A's key expires there at its first TTL, B tries while A's extended
// lock is valid: it can win masters 2, 3 and 4. With the granted-lock
// check (granted.go) masters 0 and 1 answer that a granted lock holds the
// key and B is refused; with it off (in the library client: the daemons
// keep theirs), B is granted while A holds the lock (I1). No other guard
// sees this rollback: the row checks that B's client counted no data loss.
func rollback(check bool) *Scenario {
	sc := &Scenario{
		Name:    "rollback",
		Summary: "master 2, holding A's lock with masters 0 and 1, is rolled back to a copy of its data from before A's extend (SWAPDB with a copied database) and B asks while A's extended lock is valid; granted-lock check on: B is refused",
	}
	if !check {
		sc.Name = "rollback-nogranted"
		sc.Summary = "negative control: the same with the granted-lock check off in the drill's library clients (no other guard sees this rollback): B is granted while A holds the lock"
		sc.Options = []redlock.Option{guardOff(guardswitch.GrantedLock), guardOff(guardswitch.ExtendRestores)}
		sc.Must = []string{I1}
	}
	sc.Script = func(ctx context.Context, d *Drill) error {
		const key, longKey = "rollback", "rollback-horizon"
		m := rollbackVictim
		// A's first TTL must cover the long lock, the copy and the extend
		// on a loaded machine; the long lock's TTL must exceed the extend's
		// by more than the time from its grant to the extend.
		firstTTL := 2 * time.Second
		longTTL := min(d.Cfg.Client.MaxTTL, 6*time.Second)
		extTTL := longTTL - time.Second
		dm, err := openDirect(ctx, d)
		if err != nil {
			return err
		}
		defer dm.Close()
		a, err := placeOnly(ctx, d, dm, key, firstTTL, []int{0, 1, 2})
		if err != nil {
			return err
		}
		// The longer lock, on every master: master 2's lease horizon in the
		// copy is past A's extended expiry, so the rollback does not lower
		// it.
		longClient := d.NewClientID()
		lg, lid, err := d.Acquire(ctx, d.Lib(0), longClient, longKey, longTTL, 2*time.Second)
		if err != nil {
			return fmt.Errorf("arrangement failed: the longer lock: %w", err)
		}
		defer func() { _ = d.Release(context.WithoutCancel(ctx), d.Lib(0), longClient, longKey, lg, lid) }()
		if err := settle(ctx, d, longKey, time.Now().Add(5*time.Second)); err != nil {
			return err
		}
		if v, err := dm[m].Get(ctx, d.T.Space().LockKey(longKey)).Result(); err != nil || v != lg.token {
			return fmt.Errorf("arrangement failed: the longer lock did not reach master %d (%v): its lease horizon would drop", m, errOr(err, v))
		}
		n, err := copyScript.Run(ctx, dm[m], nil).Int()
		if err != nil {
			return fmt.Errorf("copying master %d's data: %w", m, err)
		}
		d.Notef("master %d's data copied into its database 1 (%d keys): the older copy the rollback goes back to", m, n)
		a.g, err = d.Extend(ctx, 0, a.client, key, a.g, a.id, extTTL)
		if err != nil {
			return fmt.Errorf("arrangement failed: A could not extend %s: %w", key, err)
		}
		// Only now: while they stood, A's extend could not set its lock
		// again on masters 3 and 4 (restoreCopies).
		if err := a.dropPlaceholders(ctx); err != nil {
			return err
		}
		what := fmt.Sprintf("master %d rolled back to the copy from before A's extend (SWAPDB 0 1 with the copied database)", m)
		// Not an availability fault: master 2 answers and votes, and no
		// client can tell.
		err = d.Mark(ctx, what, func(ctx context.Context) error {
			if err := dm[m].Do(ctx, "SWAPDB", 0, 1).Err(); err != nil {
				return err
			}
			return dropCopyScript.Run(ctx, dm[m], nil).Err()
		})
		if err != nil {
			return err
		}
		lockKey := d.T.Space().LockKey(key)
		kept, lost := dm[0].PTTL(ctx, lockKey).Val(), dm[m].PTTL(ctx, lockKey).Val()
		d.Notef("A's key: PTTL %v on master 0 (extended), %v on master %d (rolled back)", kept, lost, m)
		if lost >= kept-500*time.Millisecond {
			return fmt.Errorf("arrangement failed: master %d kept A's extend (PTTL %v, master 0 %v)", m, lost, kept)
		}
		if err := keyGone(ctx, d, dm, m, key, "after its rollback to a copy from before A's extend"); err != nil {
			return err
		}
		if !time.Now().Before(a.g.validUntil) {
			return fmt.Errorf("arrangement failed: A's extended lease (%v) was over before its key expired on master %d", extTTL, m)
		}
		// The daemons keep every check in both rows: only the control's
		// library client contends there.
		contenders := []locker{d.Lib(1)}
		if h := d.HTTP(1); check && h != nil {
			contenders = append(contenders, h)
		}
		if _, err := contendVia(ctx, d, key, d.Cfg.TTL, a, contenders...); err != nil {
			return err
		}
		b := d.Client(1)
		var losses int64
		for _, n := range b.DataLosses() {
			losses += n
		}
		d.Notef("client B: %d grants refused over a granted lock, %d data losses seen", b.GrantRefusals(), losses)
		if losses > 0 {
			return fmt.Errorf("arrangement failed: client B saw master %d's rollback as a data loss (%v): the row would not show the granted-lock check", m, b.DataLosses())
		}
		if check && b.GrantRefusals() == 0 {
			return fmt.Errorf("arrangement failed: client B was never refused over a granted lock")
		}
		return nil
	}
	return sc
}
