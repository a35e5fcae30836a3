package local

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
)

func TestProcStat(t *testing.T) {
	state, pgrp, ok := procStat(strconv.Itoa(os.Getpid()))
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	if !ok || pgrp != syscall.Getpgrp() || state == 'Z' {
		t.Errorf("procStat(self) = %c, %d, %v, want a live process in group %d", state, pgrp, ok, syscall.Getpgrp())
	}
	if _, _, ok := procStat("no-such-pid"); ok {
		t.Errorf("procStat(no-such-pid) ok")
	}
}

func TestGroupAlive(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	tests := []struct {
		name string
		pgid int
		want bool
	}{
		{"zero", 0, false},
		{"negative", -1, false},
		{"running group", pgid, true},
	}
	for _, tt := range tests {
		if got := groupAlive(tt.pgid); got != tt.want {
			t.Errorf("groupAlive(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
	killSandboxProcesses("", []int{pgid}, 0)
	// Until Wait reaps it the leader is a zombie, and a zombie runs nothing.
	if groupAlive(pgid) {
		t.Errorf("groupAlive after kill = true, want false")
	}
	cmd.Wait()
}
