package services

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// probe waits for the readiness condition of in, and fails the run when it
// does not hold within the timeout.
func (m *Manager) probe(in *instance) {
	defer m.wg.Done()
	rd := in.spec.Readiness
	timeout := m.cfg.ReadinessTimeout
	if rd.TimeoutMs > 0 {
		timeout = time.Duration(rd.TimeoutMs) * time.Millisecond
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var check func() error
	switch {
	case rd.TCP != nil:
		check = ownTCPCheck(in, *rd.TCP)
	case rd.HTTP != "":
		client := &http.Client{
			Timeout:       time.Second,
			Transport:     &http.Transport{DisableKeepAlives: true},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
		defer client.CloseIdleConnections()
		check = ownHTTPCheck(in, rd.HTTP, func() error { return checkHTTP(in.ctx, client, rd.HTTP) })
	default:
		re := regexp.MustCompile(rd.Log)
		lp := &logProbe{path: filepath.Join(m.logDir, in.name+".log"), offset: in.logOffset}
		check = func() error { return lp.check(re) }
	}
	for {
		err := check()
		if err == nil {
			m.markReady(in)
			return
		}
		select {
		case <-in.ctx.Done():
			return
		case <-in.exited:
			return
		case <-deadline.C:
			reason := fmt.Sprintf("not ready after %d ms: %v", timeout.Milliseconds(), err)
			in.failReason.Store(&reason)
			m.log.Warn("service not ready", "service", in.name, "reason", reason)
			sig, grace := in.spec.stopSettings(m.cfg.StopTimeout)
			_ = killTree(in.ctx, in.t, sig, grace)
			return
		case <-tick.C:
		}
	}
}

func (m *Manager) markReady(in *instance) {
	changed := false
	_ = m.update(func(st *stateFile) error {
		r := st.Services[in.name]
		if r != nil && r.Instance == in.id && r.Status == apitype.StatusRunning && !r.Ready {
			r.Ready = true
			changed = true
		}
		return nil
	})
	if changed {
		m.emit(apitype.Event{Type: apitype.EventReady, Service: in.name})
	}
}

func checkTCP(port int) error {
	var err error
	for _, host := range []string{"127.0.0.1", "::1"} {
		var c net.Conn
		c, err = net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
	}
	return fmt.Errorf("nothing accepts connections on port %d", port)
}

func checkHTTP(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 399 {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return nil
}

// logProbe matches a regular expression against what a run wrote to its log.
type logProbe struct {
	path   string
	offset int64
	buf    []byte
	// chunk is the read buffer, kept across checks (one is made every 50 ms otherwise).
	chunk []byte
	// checked reports whether buf was matched since it last grew: the
	// regular expression runs over up to logProbeMax bytes, so it runs
	// again only when the log has grown.
	checked bool
}

const logProbeMax = 1 << 20

func (p *logProbe) check(re *regexp.Regexp) error {
	f, err := os.Open(p.path)
	if err == nil {
		if fi, serr := f.Stat(); serr == nil && fi.Size() < p.offset {
			p.offset = 0 // rotated
		}
		if p.chunk == nil {
			p.chunk = make([]byte, 64<<10)
		}
		for {
			n, rerr := f.ReadAt(p.chunk, p.offset)
			if n > 0 {
				p.buf = append(p.buf, p.chunk[:n]...)
				p.offset += int64(n)
				p.checked = false
			}
			if rerr != nil || n == 0 {
				break
			}
		}
		f.Close()
		if len(p.buf) > logProbeMax {
			p.buf = p.buf[len(p.buf)-logProbeMax:]
		}
	}
	if !p.checked {
		if re.Match(p.buf) {
			return nil
		}
		p.checked = true
	}
	return fmt.Errorf("log has no match for %q", re.String())
}
