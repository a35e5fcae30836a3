package local

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// The spawner's answers come from a process in the sandbox's user namespace: init's
// reader must survive anything.
func FuzzReadMsg(f *testing.F) {
	frame := func(s string) []byte {
		b := make([]byte, 4, 4+len(s))
		binary.BigEndian.PutUint32(b, uint32(len(s)))
		return append(b, s...)
	}
	f.Add(frame(`{"k":112,"pid":7}`))
	f.Add(frame(`{"k":120,"pid":7,"status":256}`))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 3, '{'})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		for range 8 {
			var a spawnAns
			if err := readMsg(r, &a); err != nil {
				return
			}
		}
	})
}

func TestReadMsgRefusesHugeFrames(t *testing.T) {
	var a spawnAns
	if err := readMsg(bytes.NewReader([]byte{0x7f, 0, 0, 0}), &a); err == nil {
		t.Error("a 2 GiB frame was accepted")
	}
}
