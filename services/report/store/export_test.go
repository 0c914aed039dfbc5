package store

import "context"

// RetentionOf exposes retentionOf: the TTL of a table in days.
func RetentionOf(ctx context.Context, s *Store, table string) (int, error) {
	return s.retentionOf(ctx, table)
}
