package rollup

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"
)

// CleanAfter is how long the builds of a day are kept once a newer whole build of the same
// cluster and day replaced them: readers take no build older than a day's newest whole build,
// but one that planned its query just before the newer build was recorded may still be
// reading an older one.
const CleanAfter = 10 * time.Minute

// cleanAfter is CleanAfter but in tests.
var cleanAfter = CleanAfter

// maxClean bounds the builds one Clean removes (one deletion of that many ids).
const maxClean = 10_000

// Deleter deletes the rows of the builds ids from a table of builds (store.Store.DeleteBuilds:
// a mutation, waited for).
type Deleter func(ctx context.Context, table string, ids []uint64) error

// Clean removes the rows, then the records, of the builds older than a whole build of their
// cluster's day recorded more than CleanAfter ago by the server's clock, and returns how many
// builds it removed: the prefixes of a day once it is built whole, and the whole builds a
// rebuild replaced (a day is rebuilt when findings arrive for it after its build: an
// imported log, a late redelivery). Without Clean each would stay until the retention.
func Clean(ctx context.Context, db *sql.DB, t Tables, del Deleter) (int, error) {
	var now uint32
	if err := db.QueryRowContext(ctx, `SELECT toUInt32(now())`).Scan(&now); err != nil {
		return 0, fmt.Errorf("clean: read the server's clock: %w", err)
	}
	before := uint32(time.Unix(int64(now), 0).Add(-cleanAfter).Unix())
	builds := map[string][]buildRecord{}
	err := scan(ctx, db, `SELECT toString(cluster), toString(day), toUInt32(until), built, build FROM `+t.Builds+`
WHERE (cluster, day) GLOBAL IN (
  SELECT cluster, day FROM `+t.Builds+` GROUP BY cluster, day HAVING count() > 1 AND countIf(`+Whole+`) > 0 AND minIf(built, `+Whole+`) < ?)`,
		[]any{before}, func(c, d string, until, built uint32, id uint64) {
			builds[pair(d, c)] = append(builds[pair(d, c)], buildRecord{until: until, built: built, build: id})
		})
	if err != nil {
		return 0, fmt.Errorf("clean: read the builds: %w", err)
	}
	var old []uint64
	for cd, bs := range builds {
		// The newest whole build recorded CleanAfter ago: readers take none older than it
		// (nor older than any newer whole build).
		var newest uint32
		for _, b := range bs {
			if b.closes(cd[:len(DayFormat)]) && b.built < before {
				newest = max(newest, b.built)
			}
		}
		for _, b := range bs {
			if b.built < newest {
				old = append(old, b.build)
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
	if err := del(ctx, t.Rows, old); err != nil {
		return 0, fmt.Errorf("clean: delete the rows of %d builds: %w", len(old), err)
	}
	if err := del(ctx, t.Builds, old); err != nil {
		return 0, fmt.Errorf("clean: delete the records of %d builds: %w", len(old), err)
	}
	return len(old), nil
}
