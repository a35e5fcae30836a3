// Package runplantest holds the test that runs one plan through the Targets of the
// three providers (the local engine directly, on its default root and on the boot
// plan's test image; Modal over the local Modal server, E2B over the local E2B server)
// and compares the reports: the boot behaves the same wherever it runs. Test code only.
package runplantest
