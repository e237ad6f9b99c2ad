// Package contracttest is latchkit's conformance suite: every backend
// (driver adapter × server) must pass it. Like gocloud.dev's drivertest, a
// driver's run is a few lines: a Harness that says how the driver connects
// to a Server (which the suite starts: miniredis, redis-server, a Cluster,
// Sentinel), and RunDeployments:
//
//	type harness struct{ contracttest.Server }
//
//	func (h harness) NewClient(t testing.TB) contracttest.Client { ... }
//	func (h harness) Unreachable(t testing.TB) backend.Backend   { ... }
//
//	func TestConformance(t *testing.T) {
//		contracttest.RunDeployments(t, func(s contracttest.Server) contracttest.Harness { return harness{s} })
//	}
//
// The suite knows no driver: it reaches servers through the backend under
// test, and speaks RESP itself for the little set-up it does aside.
//
// Subtests run in a fixed order and prefix their keys with the test's name,
// so one server can serve every subtest.
package contracttest
