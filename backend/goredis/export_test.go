package goredis

// Normalize is normalize, for the tests of package goredis_test.
var Normalize = normalize
