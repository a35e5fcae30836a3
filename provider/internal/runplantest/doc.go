// Package runplantest holds the test that runs one plan through the Targets of the one
// provider (provider.New) over each engine: the local engine directly, on its default
// root and on the boot plan's test image; Modal's engine over the local Modal server;
// E2B's over the local E2B server. It compares the reports: the boot behaves the same
// wherever it runs. Test code only.
package runplantest
