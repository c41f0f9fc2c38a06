// Package resp is a small RESP2 client: one connection, one request at a time, no retries and
// no pooling, so that every call maps to exactly one request whose outcome the caller records.
package resp

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// ErrorReply is an error the server answered (a `-` line). Any other error from Do means the
// connection failed or timed out, and the request's outcome is unknown.
type ErrorReply struct{ Text string }

func (e *ErrorReply) Error() string { return e.Text }

// IsReply reports whether err is a server's error reply.
func IsReply(err error) (string, bool) {
	var r *ErrorReply
	if errors.As(err, &r) {
		return r.Text, true
	}
	return "", false
}

// Conn is one client connection.
type Conn struct {
	c       net.Conn
	r       *bufio.Reader
	w       *bufio.Writer
	timeout time.Duration
}

// Dial connects to addr; every later call must complete within timeout.
func Dial(addr string, timeout time.Duration) (*Conn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	return &Conn{c: c, r: bufio.NewReaderSize(c, 64<<10), w: bufio.NewWriterSize(c, 64<<10), timeout: timeout}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Do sends one command and reads its reply: string (simple), []byte or nil (bulk), int64,
// []any (array), or an *ErrorReply error.
func (c *Conn) Do(args ...string) (any, error) {
	if err := c.c.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return nil, err
	}
	fmt.Fprintf(c.w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(c.w, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := c.w.Flush(); err != nil {
		return nil, err
	}
	return c.read()
}

func (c *Conn) line() (string, error) {
	l, err := c.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if len(l) < 3 || l[len(l)-2] != '\r' {
		return "", fmt.Errorf("resp: malformed line %q", l)
	}
	return l[:len(l)-2], nil
}

func (c *Conn) read() (any, error) {
	l, err := c.line()
	if err != nil {
		return nil, err
	}
	body := l[1:]
	switch l[0] {
	case '+':
		return body, nil
	case '-':
		return nil, &ErrorReply{Text: body}
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("resp: integer reply %q: %v", body, err)
		}
		return n, nil
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > 512<<20 {
			return nil, fmt.Errorf("resp: bulk length %q out of range", body)
		}
		if n == -1 {
			return nil, nil
		}
		b := make([]byte, n+2)
		if _, err := ioReadFull(c.r, b); err != nil {
			return nil, err
		}
		if b[n] != '\r' || b[n+1] != '\n' {
			return nil, fmt.Errorf("resp: bulk of %d bytes not followed by CRLF", n)
		}
		return b[:n], nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > 1<<20 {
			return nil, fmt.Errorf("resp: array length %q out of range", body)
		}
		if n == -1 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			v, err := c.read()
			if err != nil {
				if _, ok := IsReply(err); !ok {
					return nil, err
				}
				v = err
			}
			out[i] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("resp: unknown reply type in %q", l)
}

func ioReadFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
