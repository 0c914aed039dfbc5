package rollup_test

import (
	"context"
	"testing"

	"github.com/auditlens/auditlens/services/report/chtest"
	"github.com/auditlens/auditlens/services/report/rollup"
	"github.com/auditlens/auditlens/services/report/store"
)

// BenchmarkKeptFrom is what the retention adds to every Days call: one read of the retention
// the service recorded. The baseline is the smallest query of the same engine, in the same
// run. Run with
//
//	go test -run '^$' -bench KeptFrom ./rollup/
func BenchmarkKeptFrom(b *testing.B) {
	for _, e := range []struct {
		name string
		open func(testing.TB) *store.Store
	}{
		{"clickhouse-server", func(tb testing.TB) *store.Store { _, st := chtest.ServerStore(tb); return st }},
		{"chdb", chtest.EmbeddedStore},
	} {
		b.Run(e.name, func(b *testing.B) {
			st := e.open(b)
			ctx := context.Background()
			if _, err := st.Migrate(ctx, store.MigrateOptions{RetentionDays: 400}); err != nil {
				b.Fatal(err)
			}
			tables := rollup.TablesFor(st.Table("findings"))
			b.Run("baseline-select-1", func(b *testing.B) {
				for b.Loop() {
					var one uint8
					if err := st.DB().QueryRowContext(ctx, "SELECT toUInt8(1)").Scan(&one); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("kept-from", func(b *testing.B) {
				for b.Loop() {
					if _, days, err := rollup.KeptFrom(ctx, st.DB(), tables); err != nil || days != 400 {
						b.Fatal(days, err)
					}
				}
			})
		})
	}
}
