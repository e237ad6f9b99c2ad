package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestHelpIsUsage (issue 38, finding 10): every command's -h prints
// latchctl's usage line for it ("usage: latchctl NAME ..."), then its
// flags, and exits 0; never Go's default "Usage of NAME:".
func TestHelpIsUsage(t *testing.T) {
	for _, c := range commands {
		var out, errOut bytes.Buffer
		code := run(context.Background(), []string{c.name, "-h"}, &out, &errOut)
		if code != 0 || out.Len() != 0 || !strings.HasPrefix(errOut.String(), "usage: latchctl "+c.name+" ") ||
			strings.Contains(errOut.String(), "Usage of") || !strings.Contains(errOut.String(), "  -addr ") {
			t.Errorf("latchctl %s -h: exit %d, stdout %q, stderr:\n%s", c.name, code, out.String(), errOut.String())
		}
	}
}
