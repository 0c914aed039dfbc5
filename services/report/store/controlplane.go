package store

import (
	"context"
	"time"

	"github.com/auditlens/auditlens/lib/kubeversion"
)

// ControlPlaneSighting is one release a cluster's control-plane component named in its user
// agent, and the newest minute it did so (a row of control_plane_sightings, from a classify
// heartbeat).
type ControlPlaneSighting struct {
	Cluster   string
	Component string
	Version   kubeversion.Version
	Seen      time.Time
}

// ControlPlaneSightingColumns are the columns of control_plane_sightings, in the order of
// WriteControlPlaneSightings' rows.
var ControlPlaneSightingColumns = []string{"cluster", "component", "version", "seen"}

// WriteControlPlaneSightings inserts ss into control_plane_sightings as one block, the
// versions as "1.37" and the times truncated to the minute. Writing a sighting again, or an
// older one of the same day, changes nothing that readers see (they take the newest minute
// of each release before the time they ask about; the table keeps one per day).
func (s *Store) WriteControlPlaneSightings(ctx context.Context, ss []ControlPlaneSighting) error {
	rows := make([][]any, len(ss))
	for i, c := range ss {
		rows[i] = []any{c.Cluster, c.Component, c.Version.String(), c.Seen.UTC().Truncate(time.Minute)}
	}
	return s.Insert(ctx, "control_plane_sightings", ControlPlaneSightingColumns, rows)
}

// CoverageSighting is one kind of event a cluster sent (the input it came by, its audit level,
// and for a write a request-body rule reads whether its body was logged: "body", "no-body",
// else ""), and the newest minute it was seen in (a row of coverage_sightings).
type CoverageSighting struct {
	Cluster, Input, Level, Writes string
	Seen                          time.Time
}

// CoverageSightingColumns are the columns of coverage_sightings, in the order of
// WriteCoverageSightings' rows.
var CoverageSightingColumns = []string{"cluster", "input", "level", "writes", "seen"}

// WriteCoverageSightings inserts cs into coverage_sightings as one block, the times truncated
// to the minute; writing one again changes nothing readers see (they take max(seen)).
func (s *Store) WriteCoverageSightings(ctx context.Context, cs []CoverageSighting) error {
	rows := make([][]any, len(cs))
	for i, c := range cs {
		rows[i] = []any{c.Cluster, c.Input, c.Level, c.Writes, c.Seen.UTC().Truncate(time.Minute)}
	}
	return s.Insert(ctx, "coverage_sightings", CoverageSightingColumns, rows)
}

// MigrationSighting is a caller's newest call of the successor of a catalogued API version
// (the API replaced: APIGroup, APIVersion, Resource), a row of migration_sightings.
type MigrationSighting struct {
	Cluster, APIGroup, APIVersion, Resource, Username, UserAgent string
	Seen                                                         time.Time
}

// MigrationSightingColumns are the columns of migration_sightings, in the order of
// WriteMigrationSightings' rows.
var MigrationSightingColumns = []string{"cluster", "api_group", "api_version", "resource", "username", "user_agent", "seen"}

// WriteMigrationSightings inserts ms into migration_sightings as one block, to the second;
// writing one again changes nothing readers see (they take max(seen)).
func (s *Store) WriteMigrationSightings(ctx context.Context, ms []MigrationSighting) error {
	rows := make([][]any, len(ms))
	for i, m := range ms {
		rows[i] = []any{m.Cluster, m.APIGroup, m.APIVersion, m.Resource, m.Username, m.UserAgent, m.Seen.UTC().Truncate(time.Second)}
	}
	return s.Insert(ctx, "migration_sightings", MigrationSightingColumns, rows)
}

// ReviewSighting says that a heartbeat of Cluster's events, the newest of them in the minute
// Seen, came from a classify whose catalogue knows removals through Through (a row of
// review_sightings).
type ReviewSighting struct {
	Cluster string
	Through kubeversion.Version
	Seen    time.Time
}

// WriteReviewSightings inserts rs into review_sightings as one block, the times truncated to
// the minute; writing one again changes nothing readers see.
func (s *Store) WriteReviewSightings(ctx context.Context, rs []ReviewSighting) error {
	rows := make([][]any, len(rs))
	for i, r := range rs {
		rows[i] = []any{r.Cluster, r.Through.String(), r.Seen.UTC().Truncate(time.Minute)}
	}
	return s.Insert(ctx, "review_sightings", []string{"cluster", "through", "seen"}, rows)
}
