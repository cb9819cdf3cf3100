package maintenance

// SetBeforePrune makes m call f after each successful election and before
// the run's first batch: the test's place to pause the holder.
func SetBeforePrune(m *Maintainer, f func()) { m.beforePrune = f }
