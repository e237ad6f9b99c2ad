package faults_test

// clusterDriverFor is d's client of a Cluster: the entry of clusterDrivers
// of the same name. A driver without one (redigo, which serves a single
// server) has none: ok is false.
func clusterDriverFor(d driver) (cd clusterDriver, ok bool) {
	for _, cd := range clusterDrivers {
		if cd.name == d.name {
			return cd, true
		}
	}
	return clusterDriver{}, false
}
