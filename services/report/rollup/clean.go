package rollup

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"time"
)

// CleanAfter is how long the rows of a day build are kept once a newer build of the same
// cluster and day replaced it: readers take only a day's newest build, but one that planned
// its query just before the newer build was recorded may still be reading the older one.
const CleanAfter = 10 * time.Minute

// cleanAfter is CleanAfter but in tests.
var cleanAfter = CleanAfter

// maxClean bounds the builds one Clean removes (one deletion of that many ids).
const maxClean = 10_000

// Deleter deletes the rows of the builds ids from a table of builds (store.Store.DeleteBuilds:
// a mutation, waited for).
type Deleter func(ctx context.Context, table string, ids []uint64) error

// Clean removes the rows, then the records, of the day builds that a newer build of their
// cluster's day replaced more than CleanAfter ago by the server's clock, and returns how many
// builds it removed. A day is rebuilt when findings arrive for it after its build (an
// imported log, a late redelivery): without Clean each rebuild would leave a whole day of rows
// behind, kept until the retention and filtered out by every read.
func Clean(ctx context.Context, db *sql.DB, t Tables, del Deleter) (int, error) {
	var now uint32
	if err := db.QueryRowContext(ctx, `SELECT toUInt32(now())`).Scan(&now); err != nil {
		return 0, fmt.Errorf("clean: read the server's clock: %w", err)
	}
	before := time.Unix(int64(now), 0).Add(-cleanAfter)
	type clusterDay struct{ cluster, day string }
	builds := map[clusterDay]map[uint64]uint32{}
	err := scan(ctx, db, `SELECT toString(cluster), toString(day), max(built), toUInt32(0), build FROM `+t.Builds+`
WHERE (cluster, day) GLOBAL IN (
  SELECT cluster, day FROM `+t.Builds+` GROUP BY cluster, day HAVING uniqExact(build) > 1 AND max(built) < ?)
GROUP BY cluster, day, build`, []any{uint32(before.Unix())}, func(c, d string, built, _ uint32, id uint64) {
		cd := clusterDay{c, d}
		if builds[cd] == nil {
			builds[cd] = map[uint64]uint32{}
		}
		builds[cd][id] = built
	})
	if err != nil {
		return 0, fmt.Errorf("clean: read the builds: %w", err)
	}
	var old []uint64
	for _, ids := range builds {
		// Readers take argMax(build, built): of builds begun in the same second any may be
		// the one read, so every build of the newest second is kept.
		newest := slices.Max(slices.Collect(maps.Values(ids)))
		for id, built := range ids {
			if built < newest {
				old = append(old, id)
			}
		}
	}
	slices.Sort(old)
	if len(old) == 0 {
		return 0, nil
	}
	if len(old) > maxClean {
		old = old[:maxClean]
	}
	// The rows first: a record without its rows is never read (a newer one is), rows without
	// a record would be found by nothing.
	if err := del(ctx, t.Days, old); err != nil {
		return 0, fmt.Errorf("clean: delete the rows of %d builds: %w", len(old), err)
	}
	if err := del(ctx, t.Builds, old); err != nil {
		return 0, fmt.Errorf("clean: delete the records of %d builds: %w", len(old), err)
	}
	return len(old), nil
}
