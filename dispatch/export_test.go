package dispatch

// SetGenericTakePlans switches generic plans on taking connections made from
// now on, for benchmarks that compare; it returns the previous setting.
func SetGenericTakePlans(on bool) bool {
	was := genericTakePlans
	genericTakePlans = on
	return was
}
