package store

import (
	"fmt"
	"strings"
)

// SchemaSQL renders every migration for a server of version v and database, as one SQL
// script (for review, or for a DBA who applies the schema by hand). The TTL that Migrate
// sets on modern servers is included as the ALTERs it runs, for retentionDays > 0 (the
// tables that name callers; the counts are kept).
func SchemaSQL(database string, v Version, retentionDays int) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "-- auditlens schema for ClickHouse %s, generated from services/report/store (do not edit).\n", v)
	fmt.Fprintf(&b, "CREATE DATABASE IF NOT EXISTS %s;\n", database)
	vars := varsFor(database, v, "")
	for _, m := range Migrations {
		stmts, err := m.render(vars)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "\n-- migration %d: %s\n", m.Version, m.Name)
		for _, s := range stmts {
			b.WriteString(strings.TrimSpace(s))
			b.WriteString(";\n")
		}
	}
	if v.Modern() && retentionDays > 0 {
		fmt.Fprintf(&b, "\n-- retention (report --retention-days %d): every table naming a caller\n", retentionDays)
		for _, t := range Tables {
			if t.Holds == Callers {
				fmt.Fprintf(&b, "ALTER TABLE %s.%s MODIFY TTL %s;\n", database, t.Name, t.ttl(retentionDays))
			}
		}
	}
	return b.String(), nil
}
