package testutil

import "net"

// HostIPv4 is a non-loopback, non-link-local IPv4 address of this machine, or "":
// an address a sandbox with its own network reaches the host at.
func HostIPv4() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}
