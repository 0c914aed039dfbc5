package store

import (
	"context"
	"fmt"
)

// TTLOf exposes ttlOf: the TTL expression of a table, "" without one.
func TTLOf(ctx context.Context, s *Store, table string) (string, error) {
	return s.ttlOf(ctx, table)
}

// ApplyAgain runs the statements of migration version again, as a step interrupted and
// repeated would.
func ApplyAgain(ctx context.Context, s *Store, version int) error {
	ver, err := s.Version(ctx)
	if err != nil {
		return err
	}
	for _, m := range Migrations {
		if m.Version == version {
			return s.apply(ctx, m, varsFor(s.database, ver, s.cluster))
		}
	}
	return fmt.Errorf("no migration %d", version)
}
