package cloudwatch

// Written is the bytes of position files saved so far and the largest one.
func (s *Source) Written() (total, largest int64) { return s.store.written, s.store.largest }

// Bound is Position.bound.
func (p *Position) Bound(max int) int { return p.bound(max) }

// LoadPosition is the position saved in dir for the log group and prefix (its snapshot with
// its journal), as a restart loads it.
func LoadPosition(dir, group, prefix string) (Position, error) {
	st, err := openStore(dir, group, prefix)
	if err != nil {
		return Position{}, err
	}
	p, _, err := st.load()
	return p, err
}

// SavePositions saves p as a snapshot, then each of added (merged into p) as a save would.
func SavePositions(dir, group, prefix string, p *Position, added ...map[string]int64) error {
	st, err := openStore(dir, group, prefix)
	if err != nil {
		return err
	}
	if err := st.save(p, nil); err != nil {
		return err
	}
	for _, a := range added {
		for id, ts := range a {
			p.Seen[id] = ts
		}
		if err := st.save(p, a); err != nil {
			return err
		}
	}
	return nil
}
