// Package rules holds every sandbox-wide rule in exactly one place: service
// names, ports, environment variable names, paths and the messages both sides
// print for them. The sidecar (cmd/, internal/) and the host side (provider/)
// import it, so a name the host accepts is a name the sidecar accepts, and a
// default changed here changes everywhere.
//
// It is a leaf: it imports only the standard library and holds no state.
package rules
