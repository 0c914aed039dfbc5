package console

// MissNames makes Blockers first read its names on a day that holds none, as a replica
// without the newest keys would answer, until restore.
func MissNames() (restore func()) {
	old := namesOn
	namesOn = func([]string) []string { return []string{"1970-01-02"} }
	return func() { namesOn = old }
}
