package faultproxy

import (
	"bytes"
	"errors"
	"strconv"
)

// errSyntax marks bytes that are not RESP the proxy understands: the
// connection is then forwarded untouched and never chosen for a resend.
var errSyntax = errors.New("faultproxy: not RESP")

// line returns the end of the line starting at i (the index just past its
// CRLF) and the line without it, or -1 when the line is incomplete.
func line(b []byte, i int) (end int, text []byte) {
	j := bytes.Index(b[i:], []byte("\r\n"))
	if j < 0 {
		return -1, nil
	}
	return i + j + 2, b[i : i+j]
}

// parseRequest finds the first command in b: a RESP array of bulk strings
// (what clients send) or an inline command (a line of words). It returns
// the index just past it and its arguments, n = 0 when b holds no complete
// command yet, or errSyntax.
func parseRequest(b []byte) (n int, args []string, err error) {
	if len(b) == 0 {
		return 0, nil, nil
	}
	if b[0] != '*' {
		end, text := line(b, 0)
		if end < 0 {
			return 0, nil, nil
		}
		for _, f := range bytes.Fields(text) {
			args = append(args, string(f))
		}
		return end, args, nil
	}
	end, text := line(b, 0)
	if end < 0 {
		return 0, nil, nil
	}
	count, err := strconv.Atoi(string(text[1:]))
	if err != nil || count < 0 {
		return 0, nil, errSyntax
	}
	i := end
	for k := 0; k < count; k++ {
		if i >= len(b) {
			return 0, nil, nil
		}
		if b[i] != '$' {
			return 0, nil, errSyntax
		}
		end, text := line(b, i)
		if end < 0 {
			return 0, nil, nil
		}
		size, err := strconv.Atoi(string(text[1:]))
		if err != nil || size < 0 {
			return 0, nil, errSyntax
		}
		if end+size+2 > len(b) {
			return 0, nil, nil
		}
		if !bytes.Equal(b[end+size:end+size+2], []byte("\r\n")) {
			return 0, nil, errSyntax
		}
		args = append(args, string(b[end:end+size]))
		i = end + size + 2
	}
	return i, args, nil
}

// parseReply finds the first complete value in b, a reply of the server
// in RESP2 or RESP3: any type, aggregates nested to any depth, an
// attribute (|) taken together with the value it annotates. It returns
// the index just past it and whether it is a push (>, out of band: not the
// reply to a command), n = 0 when b holds no complete value yet, or
// errSyntax (streamed aggregates and strings, which Redis does not send,
// included).
func parseReply(b []byte) (n int, push bool, err error) {
	if len(b) == 0 {
		return 0, false, nil
	}
	push = b[0] == '>'
	n, err = skipValue(b, 0)
	return n, push, err
}

// skipValue returns the index just past the value starting at b[i], 0 when
// it is incomplete, or errSyntax.
func skipValue(b []byte, i int) (int, error) {
	for {
		if i >= len(b) {
			return 0, nil
		}
		end, text := line(b, i)
		if end < 0 {
			return 0, nil
		}
		if len(text) == 0 {
			return 0, errSyntax
		}
		switch text[0] {
		case '+', '-', ':', '_', ',', '#', '(':
			return end, nil
		case '$', '!', '=':
			size, err := strconv.Atoi(string(text[1:]))
			if err != nil || size < -1 {
				return 0, errSyntax
			}
			if size == -1 {
				return end, nil
			}
			if end+size+2 > len(b) {
				return 0, nil
			}
			return end + size + 2, nil
		case '*', '~', '>', '%', '|':
			count, err := strconv.Atoi(string(text[1:]))
			if err != nil || count < -1 {
				return 0, errSyntax
			}
			if text[0] == '%' || text[0] == '|' {
				count *= 2
			}
			j := end
			for k := 0; k < count; k++ {
				if j, err = skipValue(b, j); j == 0 || err != nil {
					return 0, err
				}
			}
			if text[0] != '|' {
				return j, nil
			}
			i = j // an attribute: the value it annotates follows
		default:
			return 0, errSyntax
		}
	}
}
