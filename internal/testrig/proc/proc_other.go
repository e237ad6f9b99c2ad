//go:build !linux

package proc

import "syscall"

// setDeathSignal does nothing where the kernel has no parent-death signal:
// there a child outlives a test process that dies without its cleanups.
func setDeathSignal(*syscall.SysProcAttr) {}
