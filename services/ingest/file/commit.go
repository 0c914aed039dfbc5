package file

import (
	"time"

	"github.com/auditlens/auditlens/lib/backoff"
	"github.com/auditlens/auditlens/services/ingest/tail"
)

// Checkpoints: positions saved in read order once their batches are acknowledged.

// commit saves positions in read order, each once its batch and all before it are
// acknowledged, and hands the memory of published lines back to f. A save that fails is
// retried with backoff, also while no batch arrives, until one succeeds; meanwhile the
// input is not ready. It returns an error when the last position could not be saved.
func (in *Input) commit(order <-chan *batch, f *tail.Follower) error {
	stopped := false
	cs := checkpointSaver{in: in}
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		var again <-chan time.Time
		if cs.pending != nil {
			retry.Reset(saveRetry.Delay(cs.failures))
			again = retry.C
		}
		var b *batch
		select {
		case <-again:
			cs.save()
			continue
		case next, ok := <-order:
			if !ok {
				if cs.pending != nil {
					cs.save()
				}
				if cs.pending != nil {
					return cs.err
				}
				return nil
			}
			b = next
		}
		<-b.done
		in.settled(b)
		for i := range b.chunks {
			f.Release(&b.chunks[i])
		}
		b.msgs, b.srcs = nil, nil
		if stopped {
			continue
		}
		if b.err != nil {
			// Not acknowledged (shutdown before the bus came back): keep the old position.
			stopped = true
			continue
		}
		in.em.Count(b.Counts)
		if b.pos.File.Path == "" {
			continue
		}
		pos := b.pos
		cs.pending, cs.bytes, cs.created = &pos, b.bytes, b.created
		cs.save()
	}
}

// checkpointSaver saves the newest acknowledged position and keeps saying so while it fails.
type checkpointSaver struct {
	in       *Input
	pending  *tail.Position // acknowledged, not saved yet
	bytes    int64          // of the batch that brought pending
	created  time.Time      // of that batch
	err      error
	failures int // in a row; they space the retries (saveRetry)
	logged   time.Time
}

// saveRetry spaces the retries of a checkpoint save that keeps failing.
var saveRetry = backoff.Backoff{Min: time.Second, Max: 30 * time.Second}

// saveLogEvery spaces the logs of a checkpoint save that keeps failing.
const saveLogEvery = 30 * time.Second

func (cs *checkpointSaver) save() {
	in := cs.in
	cs.pending.Saved = time.Now()
	err := in.store.Save(*cs.pending)
	if err == nil {
		in.lastSaved.Store(cs.pending.Saved.Unix())
		cs.pending, cs.err = nil, nil
		in.mu.Lock()
		in.unsavedSince, in.unsavedBytes = time.Time{}, 0
		in.mu.Unlock()
		if cs.failures > 0 {
			in.saveErr.Store(nil)
			in.log.Info("checkpoint saved again", "failed_saves", cs.failures)
			cs.failures = 0
		}
		return
	}
	in.saveErrors.Inc()
	if cs.bytes > 0 {
		in.mu.Lock()
		if in.unsavedSince.IsZero() {
			in.unsavedSince = cs.created
		}
		in.unsavedBytes += cs.bytes
		in.mu.Unlock()
		cs.bytes = 0 // counted once, however often its save is retried
	}
	cs.err = err
	cs.failures++
	in.saveErr.Store(&err)
	if now := time.Now(); cs.failures == 1 || now.Sub(cs.logged) >= saveLogEvery {
		cs.logged = now
		in.log.Error("save checkpoint; retrying (lines since the last saved position would be read again after a restart)", "err", err, "failed_saves", cs.failures)
	}
}

func (in *Input) settled(b *batch) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.unacked) > 0 {
		in.unacked = in.unacked[1:]
	}
	in.unackedBytes -= b.bytes
}
