package console

// MissNames makes Blockers first read its names on a day that holds none, as a replica
// without the newest keys would answer, until restore.
func MissNames() (restore func()) {
	old := namesOn
	namesOn = func([]string) []string { return []string{"1970-01-02"} }
	return func() { namesOn = old }
}

// SearchesOverStrings counts the searches read over the strings of the day rows.
func SearchesOverStrings() int64 { return searchesOverStrings.Load() }
