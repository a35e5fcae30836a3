package apitype

import (
	"reflect"
	"testing"
)

// StartRequest carries every option of StartServiceRequest that ServiceInfo
// echoes back, so a restart from the info loses none (a field added to both
// types and not to StartRequest fails here).
func TestStartRequestCarriesEveryOption(t *testing.T) {
	tcp, n, ms := 3000, 2, 700
	info := ServiceInfo{
		Name: "web", Command: "npm run dev", Cwd: "/w", PID: 9, Status: StatusRunning,
		Restart: RestartOnFailure, MaxRestarts: &n, Readiness: &Readiness{TCP: &tcp, TimeoutMs: 5},
		Env: map[string]string{"K": "v"}, StopSignal: "SIGINT", StopTimeoutMs: &ms,
	}
	req := info.StartRequest()
	rv, iv := reflect.ValueOf(req), reflect.ValueOf(info)
	for i := range rv.NumField() {
		name := rv.Type().Field(i).Name
		src := iv.FieldByName(name)
		if !src.IsValid() {
			t.Errorf("ServiceInfo has no field %s to echo StartServiceRequest.%s", name, name)
			continue
		}
		if src.IsZero() {
			t.Errorf("test info leaves %s zero; set it so the copy is checked", name)
		}
		if !reflect.DeepEqual(rv.Field(i).Interface(), src.Interface()) {
			t.Errorf("StartRequest().%s = %v, want %v", name, rv.Field(i).Interface(), src.Interface())
		}
	}
}

// SetOptions is StartRequest's inverse: the round trip gives the request back.
func TestSetOptionsRoundTrip(t *testing.T) {
	tcp, n, ms := 3000, 2, 700
	req := StartServiceRequest{Name: "web", Command: "npm run dev", Cwd: "/w",
		Restart: RestartOnFailure, MaxRestarts: &n, Readiness: &Readiness{TCP: &tcp, TimeoutMs: 5},
		Env: map[string]string{"K": "v"}, StopSignal: "SIGINT", StopTimeoutMs: &ms}
	rv := reflect.ValueOf(req)
	for i := range rv.NumField() {
		if rv.Field(i).IsZero() {
			t.Fatalf("test request leaves %s zero; set it so the copy is checked", rv.Type().Field(i).Name)
		}
	}
	var info ServiceInfo
	info.SetOptions(req)
	if got := info.StartRequest(); !reflect.DeepEqual(got, req) {
		t.Errorf("SetOptions then StartRequest = %+v, want %+v", got, req)
	}
}
