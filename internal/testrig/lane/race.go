//go:build race

package lane

// raceDetector: this test binary runs under the race detector.
const raceDetector = true
