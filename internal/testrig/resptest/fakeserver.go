package resptest

// The fuzz test's fake server: it answers every command with the reply
// under test.

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeServer is a Redis that answers the rueidis handshake (HELLO 3 with a
// RESP3 map, HELLO 2 with "unknown command" so that the client stays on
// RESP2, anything else with +OK) and answers FUZZ payload with the payload's
// raw bytes, then closes the connection: whatever the bytes are, the client
// either parses a reply from them or sees the connection end, and never
// waits for more.
type fakeServer struct {
	ln net.Listener
	wg sync.WaitGroup
}

func startFakeServer(tb testing.TB) *fakeServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &fakeServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(c)
			}()
		}
	}()
	tb.Cleanup(func() {
		_ = ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *fakeServer) addr() string { return s.ln.Addr().String() }

// readCommand reads one command as clients send it: an array of bulk
// strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, errors.New("not an array")
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 0 {
		return nil, errors.New("bad array length")
	}
	args := make([]string, n)
	for i := range args {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		if !strings.HasPrefix(line, "$") {
			return nil, errors.New("not a bulk string")
		}
		l, err := strconv.Atoi(strings.TrimSpace(line[1:]))
		if err != nil || l < 0 {
			return nil, errors.New("bad bulk length")
		}
		buf := make([]byte, l+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:l])
	}
	return args, nil
}

func (s *fakeServer) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		args, err := readCommand(r)
		if err != nil || len(args) == 0 {
			return
		}
		var reply string
		switch strings.ToUpper(args[0]) {
		case "HELLO":
			if len(args) > 1 && args[1] == "3" {
				reply = "%2\r\n+server\r\n+fake\r\n+proto\r\n:3\r\n"
			} else {
				reply = "-ERR unknown command 'HELLO'\r\n"
			}
		case "FUZZ":
			if len(args) > 1 {
				reply = args[1]
			}
			_, _ = io.WriteString(c, reply)
			return
		default:
			reply = "+OK\r\n"
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
	}
}
