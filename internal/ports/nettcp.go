package ports

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// StateListen is the TCP_LISTEN state code of /proc/net/tcp.
const StateListen = 0x0A

// Socket is one line of /proc/net/tcp or /proc/net/tcp6.
type Socket struct {
	Family string
	Addr   netip.Addr
	Port   int
	State  int
	Inode  uint64
}

// ParseNetTCP parses the contents of /proc/net/tcp (family apitype.FamilyIPv4)
// or /proc/net/tcp6 (apitype.FamilyIPv6). The header line is skipped; a line
// that does not parse is an error.
func ParseNetTCP(b []byte, family string) ([]Socket, error) {
	var socks []Socket
	for i, line := range bytes.Split(b, []byte{'\n'}) {
		f := strings.Fields(string(line))
		if len(f) == 0 || (i == 0 && f[0] == "sl") {
			continue
		}
		if len(f) < 10 {
			return nil, fmt.Errorf("parse net/tcp line %d: %d fields, want at least 10", i+1, len(f))
		}
		addr, port, err := parseHostPort(f[1])
		if err != nil {
			return nil, fmt.Errorf("parse net/tcp line %d: %w", i+1, err)
		}
		state, err := strconv.ParseUint(f[3], 16, 8)
		if err != nil {
			return nil, fmt.Errorf("parse net/tcp line %d: state %q", i+1, f[3])
		}
		inode, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("parse net/tcp line %d: inode %q", i+1, f[9])
		}
		socks = append(socks, Socket{Family: family, Addr: addr, Port: port, State: int(state), Inode: inode})
	}
	return socks, nil
}

// parseHostPort parses "0100007F:1F90": the address as the kernel prints it
// (32-bit words in host byte order) and the port in hex.
func parseHostPort(s string) (netip.Addr, int, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok || len(p) != 4 {
		return netip.Addr{}, 0, fmt.Errorf("address %q", s)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("port in %q", s)
	}
	raw, err := hex.DecodeString(h)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.Addr{}, 0, fmt.Errorf("address %q", s)
	}
	// Each 32-bit word was printed as a native integer holding network-order bytes.
	for w := 0; w < len(raw); w += 4 {
		binary.NativeEndian.PutUint32(raw[w:], binary.BigEndian.Uint32(raw[w:]))
	}
	addr, _ := netip.AddrFromSlice(raw)
	return addr, int(port), nil
}
