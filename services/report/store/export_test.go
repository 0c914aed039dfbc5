package store

import "context"

// TTLOf exposes ttlOf: the TTL expression of a table, "" without one.
func TTLOf(ctx context.Context, s *Store, table string) (string, error) {
	return s.ttlOf(ctx, table)
}
