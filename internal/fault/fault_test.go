package fault

import (
	"errors"
	"strings"
	"testing"
)

// A logged request failure carries its cause once, whether or not the
// message already quotes it.
func TestErrorCauseOnce(t *testing.T) {
	cause := errors.New("dial unix /admin.sock: connect: no such file or directory")
	tests := []struct {
		e    *Error
		want string
	}{
		{&Error{Msg: cause.Error(), Err: cause}, cause.Error()},
		{&Error{Msg: "caddy does not route: " + cause.Error(), Err: cause}, "caddy does not route: " + cause.Error()},
		{&Error{Msg: "start service", Err: cause}, "start service: " + cause.Error()},
		{&Error{Msg: "bad port"}, "bad port"},
	}
	for _, tt := range tests {
		got := tt.e.Error()
		if got != tt.want {
			t.Errorf("Error{%q, %v}.Error() = %q, want %q", tt.e.Msg, tt.e.Err, got, tt.want)
		}
		if tt.e.Err != nil && strings.Count(got, tt.e.Err.Error()) != 1 {
			t.Errorf("Error{%q}.Error() = %q repeats its cause", tt.e.Msg, got)
		}
	}
}
